"""Policies scored from the attention real queries pay to the cache: the chunk's own (H2O / SirLLM, SnapKV), or the
question's, read after every chunk (FINCH).

Both read the real post-RoPE queries and keys through `probe.observe_attention`, after the layer's cache already
holds the chunk, and compute attention probabilities in blocks of queries, never a full T×n matrix at once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from locret_cli.core.policies.base import Policy

QUERY_BLOCK = 64


def received_attention(query: torch.Tensor, key: torch.Tensor, scaling: float, first: int = 0,
                       per_visible: bool = False) -> torch.Tensor:
    """Attention each cache entry receives from queries first..T-1 of the chunk, summed over those queries and over
    each KV head's query group. With `per_visible`, each query's probabilities are first multiplied by the number
    of entries it sees, so an entry attended to uniformly scores 1 whatever the cache's length (FINCH's
    normalisation).

    query (B, heads, T, D): the chunk's queries, the last T entries of `key` being its own keys (causal among them).
    key (B, kv_heads, n, D). Returns (B, kv_heads, n) float32.
    """
    batch, heads, length, _ = query.shape
    kv_heads, n = key.shape[1], key.shape[2]
    group = heads // kv_heads
    keys = key.float().repeat_interleave(group, dim=1)
    total = torch.zeros(batch, heads, n, device=query.device)
    columns = torch.arange(n, device=query.device)
    for q0 in range(first, length, QUERY_BLOCK):
        block = query[:, :, q0:q0 + QUERY_BLOCK].float()
        rows = torch.arange(q0, q0 + block.shape[2], device=query.device) + (n - length)
        scores = (block @ keys.transpose(-1, -2)) * scaling
        scores = scores.masked_fill(columns[None, :] > rows[:, None], float("-inf"))
        probabilities = scores.softmax(dim=-1)
        if per_visible:
            probabilities = probabilities * (rows + 1).view(1, 1, -1, 1)
        total += probabilities.sum(dim=2)
    return total.view(batch, kv_heads, group, n).sum(dim=2)


def question_attention(query: torch.Tensor, key: torch.Tensor, scaling: float, question_length: int) -> torch.Tensor:
    """FINCH's score of every entry: the attention the last `question_length` queries (the questions read after the
    chunk) pay it, normalised per query by the entries it sees, averaged over those queries. Shapes as
    `received_attention`; returns (B, kv_heads, n) float32, the questions' own entries last."""
    first = query.shape[2] - question_length
    return received_attention(query, key, scaling, first=first, per_visible=True) / question_length


class AttentionScoredPolicy(Policy):
    """New entries enter at score 0; `observe` then sets every entry's score from the chunk's attention."""

    observes = True

    def __init__(self, head_dim: int):
        self.head_dim = head_dim

    @classmethod
    def build(cls, shape, heads=None, **knobs) -> Policy:
        return cls(shape.head_dim, **knobs)

    def score(self, layer_idx, q, k, v, token_index):
        return torch.zeros(q.shape[0], k.shape[-1] // self.head_dim, q.shape[1], device=q.device)


class H2OPolicy(AttentionScoredPolicy):
    """Heavy hitters: every entry accumulates the attention it receives from each later chunk's queries; the
    newest entries (stabilizers) are the recent window."""

    name = "h2o"

    def observe(self, layer_idx, query, key, scaling, layer):
        layer.set("scores", layer.scores + received_attention(query, key, scaling))


class SnapKVPolicy(AttentionScoredPolicy):
    """SnapKV adapted to chunks: after each chunk, every entry is rescored by the attention it gets from the chunk's
    last `window` queries, smoothed by average pooling over neighbouring entries."""

    name = "snapkv"

    def __init__(self, head_dim: int, window: int = 32, kernel: int = 7):
        super().__init__(head_dim)
        self.window, self.kernel = window, kernel

    def observe(self, layer_idx, query, key, scaling, layer):
        attention = received_attention(query, key, scaling, first=max(0, query.shape[2] - self.window))
        pooled = F.avg_pool1d(attention, self.kernel, stride=1, padding=self.kernel // 2, count_include_pad=False)
        layer.set("scores", pooled)


class LazyLLMPolicy(AttentionScoredPolicy):
    """LazyLLM's importance: the attention the chunk's last token pays each entry, averaged over the query heads
    that share its KV head. Every held entry is scored afresh after each chunk, so one the last token overlooked
    once ranks again by what the next chunk's last token pays it. With `prunes` set, the engine also prunes during
    prefill by these scores (`lazy_prefill.py`), as LazyLLM does, after a quarter of the layers unless
    `lazy_after` says otherwise."""

    name = "lazyllm"
    prunes = True

    @staticmethod
    def lazy_cut(layers: int) -> int:
        """The layer above which a read prunes unless `lazy_after` is given: a quarter of the way up."""
        return max(1, layers // 4)

    def observe(self, layer_idx, query, key, scaling, layer):
        group = query.shape[1] // key.shape[1]
        layer.set("scores", received_attention(query, key, scaling, first=query.shape[2] - 1) / group)


class FinchPolicy(AttentionScoredPolicy):
    """FINCH (prompt-guided compression, read in chunks): the question is read after each chunk, at the positions
    that follow it, and every entry is rescored by the attention the question's tokens pay it, after softmax and
    normalised per query by the entries it sees. The question's own entries are then dropped (`Engine`), so the cache
    holds only the document.

    `question_length` is the tokens of the questions read after each chunk (the read's own, `Session.read`); a FINCH
    read is steered by its questions and serves them best."""

    name = "finch"
    reads_question = True
    knobs = ("question_length",)

    def __init__(self, head_dim: int, question_length: int = 0):
        super().__init__(head_dim)
        self.question_length = question_length

    def observe(self, layer_idx, query, key, scaling, layer):
        layer.set("scores", question_attention(query, key, scaling, self.question_length))
