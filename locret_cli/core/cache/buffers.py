"""One cache layer's preallocated storage: every per-entry tensor, as stored (quantized keys and values as their
codes and scales), each (B, kv_heads, capacity[, ...]), shared by a cache and its forks (`bounded.py`)."""

from __future__ import annotations

import torch


class Buffers:
    """One layer's preallocated tensors, (B, kv_heads, capacity[, head_dim]) each, shared by a cache and its forks.

    The first `shared` entries are held by more than one cache and are read-only; `tail_owner` is the cache whose
    entries lie past them."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors, self.shared, self.tail_owner = tensors, 0, None
        self.entry_bytes = self._entry_bytes()

    def _entry_bytes(self) -> int:
        return sum(t.numel() // t.shape[2] * t.element_size() for t in self.tensors.values())

    def add(self, name: str, like: torch.Tensor) -> None:
        """A new field shaped and typed like `like` (B, kv_heads, n[, head_dim]), as long as the others."""
        self.tensors[name] = like.new_empty(like.shape[:2] + (self.capacity,) + like.shape[3:])
        self.entry_bytes = self._entry_bytes()

    @property
    def capacity(self) -> int:
        return self.tensors["keys"].shape[2]

    @classmethod
    def allocate(cls, like: dict[str, torch.Tensor], capacity: int) -> "Buffers":
        """Empty buffers shaped and typed like `like`'s tensors (B, kv_heads, n[, head_dim]), `capacity` long."""
        return cls({name: t.new_empty(t.shape[:2] + (capacity,) + t.shape[3:]) for name, t in like.items()})
