"""StreamingLLM: attention sinks plus the most recent window."""

from __future__ import annotations

import torch

from locret_cli.core.policies.base import Policy


class StreamingPolicy(Policy):
    """The first `sinks` tokens of the input score +inf; every other token scores its index, so recent wins."""

    name = "streaming"

    @classmethod
    def build(cls, shape, heads=None, **knobs) -> Policy:
        return cls(shape.kv_heads)

    def __init__(self, kv_heads: int, sinks: int = 4):
        self.kv_heads, self.sinks = kv_heads, sinks

    def score(self, layer_idx, q, k, v, token_index):
        scores = token_index.to(device=q.device, dtype=torch.float32)
        scores = torch.where(token_index.to(q.device) < self.sinks, float("inf"), scores)
        return scores.view(1, 1, -1).expand(q.shape[0], self.kv_heads, -1).clone()
