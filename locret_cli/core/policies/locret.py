"""Locret: trained retaining heads predict each entry's causal importance score; optionally guided by the questions
the document is read for."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.attention import question_attention
from locret_cli.core.policies.base import Policy
from locret_cli.core.profile_marks import HEADS, mark
from locret_cli.errors import SettingError

QUESTION_POOL = 15  # the questions' attention: each entry's becomes the best within 7 entries either side


class LocretPolicy(Policy):
    """Scores are the retaining heads' CIS for the entry's own pre-RoPE q, k and v.

    With `score_pool` > 1 (odd), each score becomes the highest CIS within score_pool // 2 tokens either side in the
    chunk, so an entry the heads rate highly keeps its neighbours: a sentence survives whole rather than as its
    best-rated pieces. 1 is the paper's rule.

    With `question_share` > 0 and questions to read for (`question_length` tokens, read after every chunk as FINCH
    reads them), each KV head keeps its entries by two rankings: the heads' scores, and the attention the questions'
    tokens pay each entry (per query, normalised by the entries it sees, pooled over neighbouring entries). An entry
    is kept where it ranks within `question_share` of the budget by the questions, or within the rest by the heads:
    the heads keep what any question may need, the questions what they ask about."""

    name = "locret"
    knobs = ("score_pool", "question_share", "question_length")

    @classmethod
    def reads_for(cls, settings) -> bool:
        return settings.question_share > 0

    @classmethod
    def build(cls, shape, heads: RetainingHeads | None = None, **knobs) -> Policy:
        if heads is None:
            raise SettingError("the locret policy needs retaining heads: pass {heads} DIR")
        return cls(heads, **knobs)

    def __init__(self, heads: RetainingHeads, score_pool: int = 1, question_share: float = 0.0,
                 question_length: int = 0):
        self.heads, self.score_pool = heads, score_pool
        self.question_share, self.question_length = question_share, question_length
        self.reads_question = self.observes = question_share > 0 and question_length > 0
        self.attention: dict[int, torch.Tensor] = {}  # each layer's, from the last chunk's questions

    @torch.no_grad()
    def score(self, layer_idx, q, k, v, token_index):
        with mark(HEADS):
            scores = self.heads.score(layer_idx, q, k, v)
            if self.score_pool > 1:
                scores = F.max_pool1d(scores, self.score_pool, stride=1, padding=self.score_pool // 2)
            return scores

    def observe(self, layer_idx, query, key, scaling, layer):
        attention = question_attention(query, key, scaling, self.question_length)
        document = attention[..., :key.shape[2] - self.question_length]  # the questions' own entries leave the cache
        self.attention[layer_idx] = F.max_pool1d(document, QUESTION_POOL, stride=1, padding=QUESTION_POOL // 2)

    def ranking(self, layer_idx: int, scores: torch.Tensor) -> torch.Tensor:
        attention = self.attention.pop(layer_idx, None)
        if attention is None:
            return scores
        by_heads = ranks(scores)
        by_question = ranks(attention)
        share = self.question_share
        if share >= 1:
            return -by_question
        return -torch.minimum(by_heads / (1 - share), by_question / share)


def ranks(scores: torch.Tensor) -> torch.Tensor:
    """Each entry's place when its head's entries are sorted best first (0: the best), as float32; scores
    (B, kv_heads, n)."""
    order = scores.argsort(dim=-1, descending=True)
    places = torch.arange(scores.shape[-1], device=scores.device, dtype=torch.float32).expand_as(order)
    return torch.empty_like(places).scatter_(-1, order, places)
