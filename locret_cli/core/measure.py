"""Memory figures: process or GPU peaks, and what a full KV cache would need."""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from locret_cli.core.cache.quantized import entry_bytes
from locret_cli.core.heads import compute_dtype
from locret_cli.core.policies.attention import QUERY_BLOCK
from locret_cli.core.shape import ModelShape, layer_windows
from locret_cli.errors import InsufficientMemoryError
from locret_cli.units import human_bytes


def reset_peak(device: torch.device) -> None:
    """Start a fresh GPU peak; the CPU's peak RSS cannot be reset and covers the whole process."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, what was measured): torch.cuda.max_memory_allocated on CUDA, else the process's peak RSS: on Linux its
    own high-water mark (`VmHWM`), since `ru_maxrss` carries a parent's peak into the processes it starts (a bench
    cell's would read as its parent's)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024, "cpu peak RSS"
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss * (1 if sys.platform == "darwin" else 1024), "cpu peak RSS"


def full_cache_bytes(model, tokens: int) -> int:
    """Bytes a plain cache of keys and values would hold for `tokens` tokens (a sliding layer holds its window, as
    transformers' own cache does)."""
    return sum(full_cache_kinds(model, tokens).values())


def full_cache_kinds(model, tokens: int) -> dict[str, int]:
    """`full_cache_bytes` of the global layers and of the sliding ones (0 where a model has none)."""
    shape = ModelShape.from_config(model.config)
    element = torch.empty(0, dtype=compute_dtype(model)).element_size()
    per_token = 2 * shape.kv_heads * shape.head_dim * element
    windows = layer_windows(model.config)
    return {"global": per_token * tokens * windows.count(None),
            "sliding": per_token * sum(min(tokens, w) for w in windows if w is not None)}


def cache_by_kind(model, caches: Sequence, tokens: int) -> dict | None:
    """For a model with sliding layers, each kind's layer count, cache peak (the largest of `caches`'
    `peak_kind_bytes`: a reading's and its fork's) and full-cache bytes for `tokens`; None for a model without."""
    windows = layer_windows(model.config)
    if not any(windows):
        return None
    full = full_cache_kinds(model, tokens)
    layers = {"global": windows.count(None), "sliding": len(windows) - windows.count(None)}
    return {kind: {"layers": layers[kind], "peak_bytes": max(c.peak_kind_bytes.get(kind, 0) for c in caches),
                   "full_cache_bytes": full[kind]} for kind in ("global", "sliding")}


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

    cache_bytes: int  # keys, values, scores, positions and origins at their largest
    activation_bytes: int  # one chunk's forward pass: hidden states, MLP, q/k/v, attention weights, head inputs
    available_bytes: int

    @property
    def need_bytes(self) -> int:
        return self.cache_bytes + self.activation_bytes


def plan_memory(model, cache_entries: int, chunk_tokens: int, head_hidden: int = 0,
                keys_move: bool = False, kv_bits: int = 16) -> MemoryPlan:
    """Estimate a run whose cache peaks at `cache_entries` per KV head and that prefills `chunk_tokens` at a time.

    The estimate counts the cache (2 · head_dim elements, or their 8- or 4-bit codes and scales, plus a float32
    score, an int32 position and an int32 origin per entry, and head_dim more when `keys_move`: the unrotated keys
    of cache.py), and for one chunk: hidden states and residuals (4 · hidden), the MLP (3 · intermediate), q/k/v
    before and after RoPE, the retaining heads' inputs and hidden layer (`head_hidden`), keys and values expanded to
    every query head, and one block of 64 queries' float32 attention over the cache (what H2O and SnapKV score
    with). Attention weights for the whole chunk are not counted: torch's fused SDPA kernels never build them. A
    sliding layer is counted at its window and one chunk (a question longer than a chunk is not planned for)."""
    shape = ModelShape.from_config(model.config)
    config = model.config.get_text_config(decoder=True)
    element = torch.empty(0, dtype=compute_dtype(model)).element_size()
    per_entry = (3 if keys_move else 2) * entry_bytes(shape.head_dim, element, kv_bits) + 12
    held = [cache_entries if w is None else min(cache_entries, w - 1 + chunk_tokens) for w in layer_windows(config)]
    cache = shape.kv_heads * sum(held) * per_entry
    intermediate = getattr(config, "intermediate_size", None) or 4 * shape.hidden_size
    per_token = (4 * shape.hidden_size + 3 * intermediate + 2 * shape.qkv_width) * element
    per_token += (shape.qkv_width + head_hidden) * 4
    attention = shape.heads * cache_entries * (2 * shape.head_dim * element + 2 * QUERY_BLOCK * 4)
    logits = getattr(config, "vocab_size", 0) * 4
    return MemoryPlan(cache, chunk_tokens * per_token + attention + logits, available_memory(model.device))


def check_fits(plan: MemoryPlan, cache_setting: str | None) -> None:
    """Refuse, in one line, a run estimated not to fit in free memory. It names `cache_setting` when the cache alone
    does not fit (None: a cache that grows with the document), else chunk_size, which bounds the activations."""
    if plan.need_bytes <= plan.available_bytes:
        return
    if plan.cache_bytes <= plan.available_bytes:
        cache_setting = "chunk_size"
    lower = (f"{{{cache_setting}}}" if cache_setting else
             "the document's length (or use a policy that evicts, such as {policy} locret)")
    raise InsufficientMemoryError(
        "this run needs about {need} beyond the weights (KV cache {cache}, one chunk's activations {activations}) "
        "but only {free} is free; lower " + lower + ", or pass {force} to run anyway",
        need=human_bytes(plan.need_bytes), cache=human_bytes(plan.cache_bytes),
        activations=human_bytes(plan.activation_bytes), free=human_bytes(plan.available_bytes))
