"""What every eviction policy shares: the scoring interface and the one selection rule."""

from __future__ import annotations

from typing import ClassVar

import torch


class Policy:
    """Scores new cache entries as they are prefilled; the engine keeps the top `budget` per KV head.

    Subclasses set `name` and implement `score`. A policy with `evicts = False` never drops anything.
    """

    name: ClassVar[str]
    evicts: ClassVar[bool] = True
    observes: ClassVar[bool] = False  # True: `observe` also sees each layer's attention during prefill

    def score(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, token_index: torch.Tensor
    ) -> torch.Tensor:
        """Scores of one layer's T new entries; higher is kept first.

        q: (B, T, heads * head_dim); k, v: (B, T, kv_heads * head_dim), pre-RoPE.
        token_index: (T,) each token's index in the whole input, whatever the position mode.
        Returns (B, kv_heads, T) float32.
        """
        raise NotImplementedError

    def observe(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, scaling: float, layer) -> None:
        """Rescore `layer`'s entries (layer.scores, (B, kv_heads, n)) from the chunk's attention, with `layer.set`.

        query (B, heads, T, D) post-RoPE; key (B, kv_heads, n, D), the whole cache including the chunk. Called
        only when `observes` is True."""
        raise NotImplementedError


def select(scores: torch.Tensor, budget: int, stabilizers: int, pinned: int = 0) -> torch.Tensor:
    """Indices to keep: the first `pinned` entries (the prompt's head) and the last `stabilizers`, whatever their
    scores, then the best-scored, `budget` in all, per head.

    scores: (B, kv_heads, n) with n > budget >= pinned + stabilizers. Returns (B, kv_heads, budget) int64,
    ascending, so kept entries stay in their original order and the pinned ones stay at 0..pinned-1.
    """
    ranked = scores.clone()
    ranked[..., :pinned] = float("inf")
    if stabilizers > 0:
        ranked[..., -stabilizers:] = float("inf")
    keep = ranked.topk(budget, dim=-1, sorted=False).indices
    return keep.sort(dim=-1).values
