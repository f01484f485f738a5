"""Diagnostics for `evaluate.py`: which kinds of answer fail and how, and what eviction reaches with perfect scores.

    python -m benchmarks.embedded.evaluate --model M --heads H --lengths 1900 --policies full,oracle,locret,streaming \\
        --budget 128 --chunk-size 128 --stabilizers 16 --by-type
    python -m benchmarks.embedded.evaluate ... --policies locret --keep-statements 3   # layer 3 never drops a fact
"""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

from locret_cli.bench.synthetic import Fact
from locret_cli.core.policies import Policy
from locret_cli.inputs.prompt import build_prompt
from locret_cli.training.labels import compute_labels
from recipes.embedded.qa_data import answer_text

FORCED = 1e9  # a score above any the heads give
VALUE_TYPES = ("pass key", "number", "name", "word")
ERRORS = ("right", "right value, sentence off", "another fact's value", "garbled copy", "other")


class LabelOracle(Policy):
    """Scores every entry with its training label (`training/labels.py`), maxed over all the questions the document
    will be asked: the ranking retaining heads learn to predict, known in advance. An upper bound for trained
    heads; meaningful only inside the model's trained positions, since the labels come from one full forward."""

    name = "oracle"

    def __init__(self, labels: torch.Tensor):
        self.labels = labels  # (layers, kv_heads, prompt tokens)

    def score(self, layer_idx, q, k, v, token_index):
        if int(token_index.max()) >= self.labels.shape[-1]:
            raise ValueError("the document was tokenized differently from the oracle's labels")
        return self.labels[layer_idx][:, token_index.cpu()].unsqueeze(0).to(q.device)


class StatementKeeper(Policy):
    """`rest`'s scores (the retaining heads', say), except that in `layers` (all when None) every entry of a
    statement (`spans`, token indices [first, last) of the read) outranks all else: what eviction would give if those
    layers never dropped a fact. Which layers the answer needs the statement in, and which it does not."""

    name = "statement-kept"

    def __init__(self, rest: Policy, spans: list[tuple[int, int]], layers: set[int] | None = None):
        self.rest, self.spans, self.layers = rest, spans, layers

    def score(self, layer_idx, q, k, v, token_index):
        scores = self.rest.score(layer_idx, q, k, v, token_index).clone()
        if self.layers is None or layer_idx in self.layers:
            for first, last in self.spans:
                scores[..., ((token_index >= first) & (token_index < last)).to(scores.device)] = FORCED
        return scores


def label_oracle(model, tokenizer, prefix_ids: list[int], text: str, facts: list[Fact]) -> LabelOracle:
    """The oracle for one document: a full forward per question, labels of the document's tokens, max over questions."""
    document = prefix_ids + tokenizer.encode(text)
    per_question = [
        compute_labels(model, document + build_prompt(tokenizer, f.question).question_ids,
                       tokenizer.encode(answer_text(f)))[..., :len(document)]
        for f in facts
    ]
    return LabelOracle(torch.stack(per_question).amax(0))


def value_type(fact: Fact) -> str:
    if fact.kind == "passkey":
        return "pass key"
    if fact.answer.isdigit():
        return "number"
    return "name" if fact.answer[:1].isupper() else "word"


def error_kind(answer: str, fact: Fact, facts: list[Fact]) -> str:
    """How an answer relates to the expected sentence (`Fact.reply`): right; the right value in a sentence that
    differs; another fact's value; a garbled copy of the value (same first two characters); or anything else. The
    value is what follows the answer's last " is "."""
    if answer == fact.reply:
        return "right"
    value = answer.rpartition(" is ")[2].removesuffix(".")
    if value == fact.answer:
        return "right value, sentence off"
    if value in {f.answer for f in facts if f is not fact}:
        return "another fact's value"
    return "garbled copy" if value[:2] == fact.answer[:2] else "other"


def type_table(rows: list[tuple[str, int, str, str]]) -> str:
    """Markdown from (policy, length, value type, error kind) rows: counts of each error kind per value type."""
    counts = Counter(rows)
    lines = ["| policy | document tokens | answer type | " + " | ".join(ERRORS) + " |",
             "|---|---:|---|" + "---:|" * len(ERRORS)]
    for policy, length in sorted({(p, n) for p, n, _, _ in rows}, key=lambda x: (x[1], x[0])):
        for kind in VALUE_TYPES:
            total = sum(counts[(policy, length, kind, e)] for e in ERRORS)
            if total:
                cells = " | ".join(f"{counts[(policy, length, kind, e)]}/{total}" for e in ERRORS)
                lines.append(f"| {policy} | {length:,} | {kind} | {cells} |")
    return "\n".join(lines)


def kept_share(cache, first: int, last: int) -> float:
    """The share of entries for token indices [first, last) that the cache holds, over every layer and KV head."""
    held = [((layer.origins >= first) & (layer.origins < last)).sum(-1).float() for layer in cache.layers]
    return (torch.stack(held).mean() / (last - first)).item()


DEPTHS = (0.2, 0.4, 0.6, 0.8, 1.0)
KEPT = ((0.75, "75% or more"), (0.5, "50-75%"), (0.25, "25-50%"), (0.0, "less than 25%"))


def _share_table(rows, column: str, bins: list[str], bin_of) -> str:
    """Markdown: right/asked per (policy, length) and bin, from (policy, length, value, correct) rows."""
    cells = defaultdict(list)
    for policy, length, value, correct in rows:
        cells[(policy, length, bin_of(value))].append(correct)
    lines = [f"| policy | document tokens | {column}: " + " | ".join(bins) + " |", "|---|---:|" + "---:|" * len(bins)]
    for policy, length in sorted({(p, n) for p, n, _, _ in rows}, key=lambda x: (x[1], x[0])):
        counts = [cells[(policy, length, b)] for b in bins]
        cells_text = " | ".join(f"{sum(c)}/{len(c)}" if c else "-" for c in counts)
        lines.append(f"| {policy} | {length:,} | {cells_text} |")
    return "\n".join(lines)


def depth_table(rows: list[tuple[str, int, float, bool]]) -> str:
    """Right answers by the fact's depth in fifths of the document."""
    bins = [f"{round(100 * (d - 0.2))}-{round(100 * d)}%" for d in DEPTHS]
    return _share_table(rows, "depth", bins, lambda depth: bins[min(4, int(depth * 5))])


def kept_table(rows: list[tuple[str, int, float, bool]]) -> str:
    """Right answers by how much of the fact's statement the cache held when the question came."""
    bins = [name for _, name in KEPT]
    return _share_table(rows, "statement kept", bins, lambda kept: next(name for low, name in KEPT if kept >= low))
