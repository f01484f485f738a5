"""The bounded KV cache: keys, values, scores and positions of every entry, kept and evicted together.

Each layer holds, per KV head, n entries:
    keys, values: (B, kv_heads, n, head_dim) in the model's dtype, keys already rotated for their position;
    scores:       (B, kv_heads, n) float32, the eviction policy's score of each entry;
    positions:    (B, kv_heads, n) int32, the position each key is currently rotated for;
    origins:      (B, kv_heads, n) int32, the entry's token index in the whole input, which no eviction or
                  renumbering changes (4 bytes per entry and KV head: what citations map back to pages).
Heads select independently, so the same slot may hold different tokens in different heads; every head always holds
the same number of entries, which keeps the model's attention mask valid.

`LocretCache.evict` is the one place entries are dropped, and it gathers all five tensors with the same indices.
Every update replaces a tensor rather than writing into it, so `LocretCache.fork` can share them all.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import Cache, DynamicLayer

from locret_cli.rope import rerotation_angles, rotate


class ScoredLayer(DynamicLayer):
    """A DynamicLayer that also stores the scores, positions and origins of its entries."""

    def __init__(self):
        super().__init__()
        self.scores: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.origins: torch.Tensor | None = None
        self.staged_positions: torch.Tensor | None = None
        self.staged_origins: torch.Tensor | None = None
        self.staged_scores: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append T new entries (key_states: (B, kv_heads, T, head_dim)) with their staged positions, origins and
        scores."""
        batch, heads, new, _ = key_states.shape
        positions, origins = (staged.to(key_states.device, torch.int32).view(1, 1, new).expand(batch, heads, new)
                              for staged in (self.staged_positions, self.staged_origins))
        scores = self.staged_scores
        if scores is None:
            scores = torch.zeros(batch, heads, new, dtype=torch.float32, device=key_states.device)
        self.staged_scores = None
        keys, values = super().update(key_states, value_states)
        if self.scores is None:
            self.scores, self.positions, self.origins = scores, positions, origins
        else:
            self.scores = torch.cat((self.scores, scores), dim=-1)
            self.positions = torch.cat((self.positions, positions), dim=-1)
            self.origins = torch.cat((self.origins, origins), dim=-1)
        return keys, values

    def tensors(self) -> dict[str, torch.Tensor]:
        """The five per-entry tensors by name (empty before the first update)."""
        if self.keys is None or self.scores is None:
            return {}
        return {"keys": self.keys, "values": self.values, "scores": self.scores, "positions": self.positions,
                "origins": self.origins}

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


class LocretCache(Cache):
    """One ScoredLayer per decoder layer, plus the bookkeeping the engine reports."""

    def __init__(self, num_layers: int):
        super().__init__(layers=[ScoredLayer() for _ in range(num_layers)])
        self.frequencies: torch.Tensor | None = None  # inverse frequencies the cached keys are rotated with
        self.peak_tokens = 0
        self.peak_bytes = 0

    def stage(self, positions: torch.Tensor, origins: torch.Tensor) -> None:
        """Set the positions and origins (token indices) (T,) of the tokens the next forward pass appends."""
        for layer in self.layers:
            layer.staged_positions, layer.staged_origins = positions, origins

    def fork(self) -> "LocretCache":
        """A cache that starts as this one and shares its tensors: updates on either replace tensors, never write
        into them, so neither sees the other's."""
        clone = copy.copy(self)
        clone.layers = [copy.copy(layer) for layer in self.layers]
        return clone

    def stage_scores(self, layer_idx: int, scores: torch.Tensor) -> None:
        """Set the scores (B, kv_heads, T) of the tokens the next forward pass appends to `layer_idx`."""
        self.layers[layer_idx].staged_scores = scores

    def length(self) -> int:
        """Entries per head (the same in every layer and head)."""
        return self.layers[0].get_seq_length()

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)

    def note_peak(self) -> None:
        """Record the current size; called after every forward pass, when the cache is at its largest."""
        self.peak_tokens = max(self.peak_tokens, self.length())
        self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def evict(self, layer_idx: int, keep: torch.Tensor) -> None:
        """Keep only entries `keep` (B, kv_heads, k), ascending, in one layer: keys, values, scores, positions and
        origins."""
        layer = self.layers[layer_idx]
        index = keep.unsqueeze(-1).expand(-1, -1, -1, layer.keys.shape[-1])
        layer.keys = layer.keys.gather(2, index)
        layer.values = layer.values.gather(2, index)
        layer.scores = layer.scores.gather(2, keep)
        layer.positions = layer.positions.gather(2, keep)
        layer.origins = layer.origins.gather(2, keep)

    def move_keys(self, new_positions: torch.Tensor | None, new_frequencies: torch.Tensor) -> None:
        """Re-rotate every cached key to `new_positions` (B, kv_heads, n) under `new_frequencies`.

        new_positions None keeps each entry's position (a frequency switch only).
        """
        for layer in self.layers:
            if layer.keys is None or layer.keys.numel() == 0:
                continue
            target = layer.positions if new_positions is None else new_positions.to(layer.positions)
            if torch.equal(target, layer.positions) and torch.equal(self.frequencies, new_frequencies):
                continue
            angles = rerotation_angles(layer.positions, target, self.frequencies, new_frequencies)
            layer.keys = rotate(layer.keys, angles.to(layer.keys.device))
            layer.positions = target
        self.frequencies = new_frequencies
