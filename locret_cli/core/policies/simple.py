"""Baselines that need no attention: random scores and negative key norm."""

from __future__ import annotations

import torch

from locret_cli.core.policies.base import Policy


class RandomPolicy(Policy):
    """Uniform random scores from a seeded generator: what eviction with no information achieves."""

    name = "random"

    @classmethod
    def build(cls, shape, heads=None, **knobs) -> Policy:
        return cls(shape.kv_heads)

    def __init__(self, kv_heads: int, seed: int = 0):
        self.kv_heads = kv_heads
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def score(self, layer_idx, q, k, v, token_index):
        scores = torch.rand(q.shape[0], self.kv_heads, q.shape[1], generator=self.generator)
        return scores.to(q.device)


class KNormPolicy(Policy):
    """Keys with a small norm tend to draw attention, so the score is minus the key's L2 norm per KV head."""

    name = "knorm"

    @classmethod
    def build(cls, shape, heads=None, **knobs) -> Policy:
        return cls(shape.head_dim)

    def __init__(self, head_dim: int):
        self.head_dim = head_dim

    def score(self, layer_idx, q, k, v, token_index):
        keys = k.float().view(k.shape[0], k.shape[1], -1, self.head_dim)  # (B, T, kv_heads, head_dim)
        return -keys.norm(dim=-1).transpose(1, 2)
