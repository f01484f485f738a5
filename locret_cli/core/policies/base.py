"""What every eviction policy shares: the scoring interface and the one selection rule."""

from __future__ import annotations

from typing import ClassVar

import torch

from locret_cli.core.shape import ModelShape


class Policy:
    """Scores new cache entries as they are prefilled; the engine keeps the top `budget` per KV head.

    Subclasses set `name` and implement `score`. A policy with `evicts = False` never drops anything.
    """

    name: ClassVar[str]
    evicts: ClassVar[bool] = True
    observes: ClassVar[bool] = False  # True: `observe` also sees each layer's attention during prefill
    reads_question: ClassVar[bool] = False  # True: the questions are read after every chunk (FINCH)
    prunes: ClassVar[bool] = False  # True: reads with lazy prefill from `lazy_cut` unless `lazy_after` is given
    knobs: ClassVar[tuple[str, ...]] = ()  # the values of a read this policy is built with (`make_policy` passes them)

    @classmethod
    def reads_for(cls, settings) -> bool:
        """Whether a read with `settings` (ReadSettings) reads the questions it is given after every chunk."""
        return cls.reads_question

    @classmethod
    def build(cls, shape: ModelShape, heads=None, **knobs) -> "Policy":
        """This policy for a model of `shape`, with `heads` where it uses them and its own `knobs`."""
        return cls()

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

    def ranking(self, layer_idx: int, scores: torch.Tensor) -> torch.Tensor:
        """What the entries of layer `layer_idx` are selected by, from their `scores` (B, kv_heads, n), at eviction:
        the scores themselves, unless the policy ranks by something besides."""
        return scores


def select(scores: torch.Tensor, budget: int, stabilizers: int, pinned: int = 0, origins: torch.Tensor | None = None,
           span: int = 1) -> torch.Tensor:
    """Indices to keep: the first `pinned` entries (the prompt's head) and the last `stabilizers`, whatever their
    scores, then the best-scored, `budget` in all, per head.

    With `span` > 1, entries are kept or dropped by span: the document's tokens cut into blocks of `span` by their
    `origins` (token index), each entry ranked by the best score in its block, so whole blocks are kept, best first,
    and only the last one taken may be cut (its earliest entries kept). A small model reads runs of text better than
    scattered tokens.

    scores: (B, kv_heads, n) with n > budget >= pinned + stabilizers; origins: (B, kv_heads, n) int, needed when
    span > 1. Returns (B, kv_heads, budget) int64, ascending, so kept entries stay in their original order and the
    pinned ones stay at 0..pinned-1.
    """
    ranked = span_scores(scores, origins, span) if span > 1 else scores.clone()
    ranked[..., :pinned] = float("inf")
    if stabilizers > 0:
        ranked[..., -stabilizers:] = float("inf")
    if span > 1:  # ties (a block's entries) keep their order, so a cut block keeps its start
        keep = ranked.sort(dim=-1, descending=True, stable=True).indices[..., :budget]
    else:
        keep = ranked.topk(budget, dim=-1, sorted=False).indices
    return ascending(keep, scores.shape[-1])


def ascending(indices: torch.Tensor, n: int) -> torch.Tensor:
    """`indices` (B, kv_heads, k), distinct in each head and below `n`, sorted ascending: marked in a mask and read
    back in order, which is several times faster than sorting them on a CPU."""
    marked = torch.zeros(indices.shape[:-1] + (n,), dtype=torch.bool, device=indices.device)
    marked.scatter_(-1, indices, True)
    return marked.nonzero()[:, -1].view(indices.shape)


def span_scores(scores: torch.Tensor, origins: torch.Tensor, span: int) -> torch.Tensor:
    """Each entry's block's best score: blocks are origins // span. scores, origins: (B, kv_heads, n); returns
    (B, kv_heads, n) float32."""
    block = torch.div(origins.long(), span, rounding_mode="floor")
    block = block - block.min(dim=-1, keepdim=True).values
    best = torch.full((*scores.shape[:-1], int(block.max()) + 1), float("-inf"), device=scores.device)
    best = best.scatter_reduce(-1, block, scores.float(), "amax")
    return best.gather(-1, block)
