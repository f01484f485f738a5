"""Memory figures: process or GPU peaks, and what a full KV cache would need."""

from __future__ import annotations

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
