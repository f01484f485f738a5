"""Locret: trained retaining heads predict each entry's causal importance score."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.base import Policy
from locret_cli.core.profile_marks import HEADS, mark
from locret_cli.errors import SettingError


class LocretPolicy(Policy):
    """Scores are the retaining heads' CIS for the entry's own pre-RoPE q, k and v.

    With `score_pool` > 1 (odd), each score becomes the highest CIS within score_pool // 2 tokens either side in the
    chunk, so an entry the heads rate highly keeps its neighbours: a sentence survives whole rather than as its
    best-rated pieces. 1 is the paper's rule."""

    name = "locret"
    knobs = ("score_pool",)

    @classmethod
    def build(cls, shape, heads: RetainingHeads | None = None, **knobs) -> Policy:
        if heads is None:
            raise SettingError("the locret policy needs retaining heads: pass {heads} DIR")
        return cls(heads, **knobs)

    def __init__(self, heads: RetainingHeads, score_pool: int = 1):
        self.heads, self.score_pool = heads, score_pool

    @torch.no_grad()
    def score(self, layer_idx, q, k, v, token_index):
        with mark(HEADS):
            scores = self.heads.score(layer_idx, q, k, v)
            if self.score_pool > 1:
                scores = F.max_pool1d(scores, self.score_pool, stride=1, padding=self.score_pool // 2)
            return scores
