"""Locret: trained retaining heads predict each entry's causal importance score."""

from __future__ import annotations

import torch

from locret_cli.heads import RetainingHeads
from locret_cli.policies.base import Policy


class LocretPolicy(Policy):
    """Scores are the retaining heads' CIS for the entry's own pre-RoPE q, k and v."""

    name = "locret"

    def __init__(self, heads: RetainingHeads):
        self.heads = heads

    @torch.no_grad()
    def score(self, layer_idx, q, k, v, token_index):
        return self.heads.score(layer_idx, q, k, v)
