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

    def score(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, token_index: torch.Tensor
    ) -> torch.Tensor:
        """Scores of one layer's T new entries; higher is kept first.

        q: (B, T, heads * head_dim); k, v: (B, T, kv_heads * head_dim), pre-RoPE.
        token_index: (T,) each token's index in the whole input, whatever the position mode.
        Returns (B, kv_heads, T) float32.
        """
        raise NotImplementedError


def select(scores: torch.Tensor, budget: int, stabilizers: int) -> torch.Tensor:
    """Indices to keep: the last `stabilizers` entries, then the best-scored, `budget` in all, per head.

    scores: (B, kv_heads, n) with n > budget. Returns (B, kv_heads, budget) int64, ascending, so kept entries stay
    in their original order.
    """
    ranked = scores.clone()
    if stabilizers > 0:
        ranked[..., -stabilizers:] = float("inf")
    keep = ranked.topk(budget, dim=-1, sorted=False).indices
    return keep.sort(dim=-1).values
