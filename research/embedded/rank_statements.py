"""Where the entries of a document's statements rank among all its entries by the eviction score (the retaining
heads' CIS, pooled as the engine pools it), and which other tokens rank in the top `budget`.

    python -m research.embedded.rank_statements --length 128000 --documents 3 --prose-packages runs/prose-packages

Scores never change once given, so what a long read keeps is close to the top (budget − stabilizers) by score, plus
the last stabilizers: a statement entry ranked past the budget is almost surely evicted.

A second table looks at the last layer alone, whose cache the answer reads the fact from (docs/embedded-model.md):
per statement and KV head, where its best-scored entry ranks, and the share of its entries the cache holds when
the read ends; and what its top (budget − stabilizers) entries outside the statements are: the share on " is" or
the 4 tokens after it, where a statement's value sits, against that share of the whole document.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import torch

from benchmarks.embedded.evaluate import DEV_SEED, reading_ids, spans_in
from locret_cli.api import Session
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.models.embedded import load_embedded
from locret_cli.settings import ReadSettings
from recipes import prose
from recipes.build_embedded import DEFAULTS
from recipes.embedded.validation import dev_document, prose_document


class RecordingPolicy(LocretPolicy):
    """LocretPolicy that also keeps every score it gives: scores[layer] is a list of (kv_heads, chunk) tensors."""

    def __init__(self, heads, score_pool: int):
        super().__init__(heads, score_pool)
        self.scores: dict[int, list[torch.Tensor]] = {}

    def score(self, layer_idx, q, k, v, token_index):
        scores = super().score(layer_idx, q, k, v, token_index)
        self.scores.setdefault(layer_idx, []).append(scores[0].float().cpu())
        return scores


def statement_mask(length: int, spans: list[tuple[int, int]], reach: int = 0) -> torch.Tensor:
    """(length,) bool: True inside any [first − reach, last + reach) of `spans`."""
    mask = torch.zeros(length, dtype=torch.bool)
    for first, last in spans:
        mask[max(0, first - reach):last + reach] = True
    return mask


def rank_document(loaded, heads, text: str, facts, settings: ReadSettings,
                  outranking: Counter) -> tuple[list[float], list[tuple[int, float]], list[tuple[float, float]]]:
    """The median rank of each statement's entries, one per statement, layer and KV head; counts the other tokens
    in the top `budget` (at most 200 per layer and head) into `outranking`. Also, in the last layer, per attribute
    statement and KV head: (the rank of its best-scored entry, the share of its entries held when the read ends);
    and per KV head: (the share of its top budget − stabilizers entries outside the statements' pools that lie
    `after_is`, the share of all entries that do)."""
    tokenizer = loaded.tokenizer
    prefix = prompt_layout(tokenizer).head_ids
    ids = reading_ids(tokenizer, prefix, text, settings.chunk_size)
    spans = spans_in(tokenizer, ids, facts)
    in_statement = statement_mask(len(ids), spans)
    policy = RecordingPolicy(heads, settings.score_pool)
    reading = Session(loaded, heads).read(text_document(text), settings, force=True, policy=policy)
    medians, last_layer, clauses = [], [], []
    near_statement, clause_ends = statement_mask(len(ids), spans, settings.score_pool // 2), after_is(tokenizer, ids)
    final = max(policy.scores)
    held = reading.engine.cache.layers[final].origins[0]  # (kv_heads, entries)
    for layer, chunks in policy.scores.items():
        for head, head_scores in enumerate(torch.cat(chunks, dim=-1)):
            order = head_scores.argsort(descending=True)
            rank = torch.empty_like(order)
            rank[order] = torch.arange(len(order))
            medians += [rank[first:end].float().median().item() for first, end in spans]
            top = order[: settings.budget]
            outranking.update(tokenizer.decode([ids[t]]) for t in top[~in_statement[top]][:200].tolist())
            if layer == final:
                last_layer += [(int(rank[first:end].min()),
                                ((held[head] >= first) & (held[head] < end)).sum().item() / (end - first))
                               for (first, end), fact in zip(spans, facts) if fact.kind == "attribute"]
                chosen = order[: settings.budget - settings.stabilizers]
                chosen = chosen[~near_statement[chosen]]
                clauses.append((clause_ends[chosen].float().mean().item(), clause_ends.float().mean().item()))
    return medians, last_layer, clauses


def after_is(tokenizer, ids: list[int], reach: int = 4) -> torch.Tensor:
    """(len(ids),) bool: the token " is" and the `reach` tokens after each, where a statement's value sits."""
    marks = torch.tensor(ids) == tokenizer.encode(" is")[-1]
    near = marks.clone()
    for step in range(1, reach + 1):
        near[step:] |= marks[:-step]
    return near


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=128000)
    parser.add_argument("--documents", type=int, default=3)
    parser.add_argument("--prose-packages", type=Path, help="prose.py's `pip install --target` folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded, heads = load_embedded()
    settings = ReadSettings(budget=DEFAULTS["budget"], chunk_size=DEFAULTS["chunk_size"],
                            stabilizers=DEFAULTS["stabilizers"], score_pool=DEFAULTS["score_pool"])
    paragraphs = prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages)
    print("| filler | median rank of a statement's entries | statements ranked within the budget | "
          "tokens most often in the top budget, statements left out |\n|---|---:|---:|---|")
    chosen = settings.budget - settings.stabilizers
    lasts, clauses = {}, {}
    for filler in ("generated", "prose"):
        medians, outranking, lasts[filler], clauses[filler] = [], Counter(), [], []
        for d in range(args.documents):
            rng = random.Random(DEV_SEED + 97 * args.length + d)
            facts, text = (prose_document(loaded.tokenizer, rng, args.length, paragraphs) if filler == "prose"
                           else dev_document(loaded.tokenizer, rng, args.length))
            document_medians, document_last, document_clauses = rank_document(loaded, heads, text, facts, settings,
                                                                              outranking)
            medians, lasts[filler] = medians + document_medians, lasts[filler] + document_last
            clauses[filler] += document_clauses
        medians.sort()
        within = sum(m < settings.budget for m in medians) / len(medians)
        common = ", ".join(repr(t) for t, _ in outranking.most_common(12))
        print(f"| {filler} | {medians[len(medians) // 2]:,.0f} | {within:.0%} | {common} |")
    print(f"\nlast layer, attribute statements and KV heads: best entry ranked within {chosen:,}, and the share of "
          f"entries held at the end; of its top {chosen:,} outside the statements, the share on \" is\" or the 4 "
          f"tokens after it (in the whole document)\n\n| filler | best entry within {chosen:,} | share held: median | "
          "whole (90% or more) | none | top entries after \" is\" |\n|---|---:|---:|---:|---:|---:|")
    for filler, rows in lasts.items():
        shares = sorted(share for _, share in rows)
        top, base = (sum(c[i] for c in clauses[filler]) / len(clauses[filler]) for i in (0, 1))
        print(f"| {filler} | {sum(best < chosen for best, _ in rows)}/{len(rows)} | {shares[len(shares) // 2]:.0%} | "
              f"{sum(s >= 0.9 for s in shares)}/{len(rows)} | {sum(s == 0 for s in shares)}/{len(rows)} | "
              f"{top:.0%} ({base:.1%}) |")


if __name__ == "__main__":
    main()
