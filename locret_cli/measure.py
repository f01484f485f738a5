"""Memory figures: process or GPU peaks, and what a full KV cache would need."""

from __future__ import annotations

import os
import resource
import sys

import torch

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
