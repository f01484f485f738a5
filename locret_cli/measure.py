"""Memory figures: process or GPU peaks, and what a full KV cache would need."""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass

import torch

from locret_cli.errors import LocretError
from locret_cli.heads import ModelShape, compute_dtype


def reset_peak(device: torch.device) -> None:
    """Start a fresh GPU peak; the CPU's peak RSS cannot be reset and covers the whole process."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, what was measured): torch.cuda.max_memory_allocated on CUDA, else the process's peak RSS."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024), "cpu peak RSS"


def full_cache_bytes(model, tokens: int) -> int:
    """Bytes a plain cache of keys and values would hold for `tokens` tokens."""
    shape = ModelShape.from_config(model.config)
    element = torch.empty(0, dtype=compute_dtype(model)).element_size()
    return shape.layers * 2 * shape.kv_heads * shape.head_dim * element * tokens


def available_memory(device: torch.device) -> int:
    """Bytes that could still be allocated: free GPU memory on CUDA, else the kernel's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@dataclass(frozen=True)
class MemoryPlan:
    """What one run is estimated to need beyond the loaded weights, in bytes, and what is free for it."""

    cache_bytes: int  # keys, values, scores and positions at their largest
    activation_bytes: int  # one chunk's forward pass: hidden states, MLP, q/k/v, attention weights, head inputs
    available_bytes: int

    @property
    def need_bytes(self) -> int:
        return self.cache_bytes + self.activation_bytes


def plan_memory(model, cache_entries: int, chunk_tokens: int, head_hidden: int = 0) -> MemoryPlan:
    """Estimate a run whose cache peaks at `cache_entries` per KV head and that prefills `chunk_tokens` at a time.

    The estimate counts the cache (2 · head_dim elements plus a float32 score and an int32 position per entry), and
    for one chunk: hidden states and residuals (4 · hidden), the MLP (3 · intermediate), q/k/v before and after RoPE,
    float32 attention weights for every query head over the whole cache (CPU attention with a mask builds them) and
    the retaining heads' inputs and hidden layer (`head_hidden`)."""
    shape = ModelShape.from_config(model.config)
    config = model.config.get_text_config(decoder=True)
    element = torch.empty(0, dtype=compute_dtype(model)).element_size()
    per_entry = 2 * shape.head_dim * element + 8
    cache = shape.layers * shape.kv_heads * cache_entries * per_entry
    intermediate = getattr(config, "intermediate_size", None) or 4 * shape.hidden_size
    per_token = (4 * shape.hidden_size + 3 * intermediate + 2 * shape.qkv_width) * element
    per_token += (shape.qkv_width + head_hidden) * 4
    attention = 2 * shape.heads * chunk_tokens * cache_entries * 4
    logits = getattr(config, "vocab_size", 0) * 4
    return MemoryPlan(cache, chunk_tokens * per_token + attention + logits, available_memory(model.device))


def check_fits(plan: MemoryPlan, setting: str) -> None:
    """Refuse, in one line, a run estimated not to fit in free memory; `setting` names what to lower."""
    if plan.need_bytes <= plan.available_bytes:
        return
    gib = 2**30
    raise LocretError(
        f"this run needs about {plan.need_bytes / gib:.1f} GiB beyond the weights (KV cache "
        f"{plan.cache_bytes / gib:.1f} GiB, one chunk's activations {plan.activation_bytes / gib:.1f} GiB) but only "
        f"{plan.available_bytes / gib:.1f} GiB is free; lower {setting}, or pass --force to run anyway"
    )
