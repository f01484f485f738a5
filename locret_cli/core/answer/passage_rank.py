"""Where the passages that best match a question's words lie: BM25 over stretches of the document's own tokens, for
`--locate bm25` (`core/answer/reread.py`).

    scores, spans = passage_scores(tokenizer, input_ids, question, skip, 1024)  # one score per passage
    windows = best_passages(scores, spans, count=3, size=1024, start=skip, tokens=len(input_ids))

The document after its first `skip` tokens (the prompt's head) is cut into passages of PASSAGE_TOKENS tokens (or half
a window, when that is less, so that a window holds its passage with text on both sides), one every half passage.
Each is decoded, and its words (lowercased, as grounding reads them, common words left out) are scored against the
question's with Okapi BM25: rarer words weigh more, a word's repeats add less and less, and a long passage's matches
count for less. A window of `size` tokens is centred on each of the best passages in turn.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from locret_cli.checks.grounding import COMMON, words
from locret_cli.core.answer.locate import joined

PASSAGE_TOKENS = 256
K1 = 1.2  # how fast a word's repeats in one passage stop adding to its score
B = 0.75  # how much a passage's length discounts its matches


def passage_spans(tokens: int, skip: int, length: int) -> list[tuple[int, int]]:
    """The passages [first, end) of token indices after `skip`: `length` long, one every half passage, the last one
    ending at `tokens`."""
    spans = []
    for first in range(skip, tokens, max(length // 2, 1)):
        spans.append((first, min(first + length, tokens)))
        if first + length >= tokens:
            break
    return spans


def bm25_scores(passages: list[list[str]], question: list[str]) -> list[float]:
    """Okapi BM25 of each passage (its words) for the question's words; 0 for a passage sharing none of them."""
    asked = [w for w in dict.fromkeys(question) if w not in COMMON]
    if not passages or not asked:
        return [0.0] * len(passages)
    counts = [Counter(p) for p in passages]
    mean_length = sum(len(p) for p in passages) / len(passages) or 1.0
    scores = [0.0] * len(passages)
    for word in asked:
        holding = sum(1 for c in counts if word in c)
        if not holding:
            continue
        idf = math.log(1 + (len(passages) - holding + 0.5) / (holding + 0.5))
        for i, c in enumerate(counts):
            if word in c:
                tf, length = c[word], len(passages[i])
                scores[i] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / mean_length))
    return scores


def passage_scores(tokenizer, input_ids: torch.Tensor, question: str, skip: int,
                   size: int) -> tuple[list[float], list[tuple[int, int]]]:
    """Each passage's BM25 score for `question`, and the passages' token spans (`passage_spans`), for windows of
    `size` tokens."""
    spans = passage_spans(len(input_ids), skip, min(PASSAGE_TOKENS, max(size // 2, 1)))
    ids = input_ids.tolist()
    texts = [tokenizer.decode(ids[first:end], skip_special_tokens=True) for first, end in spans]
    return bm25_scores([words(text) for text in texts], words(question)), spans


def best_passages(scores: list[float], spans: list[tuple[int, int]], count: int, size: int, start: int,
                  tokens: int) -> list[tuple[int, int]]:
    """Up to `count` windows [first, end) of `size` tokens (shorter at the input's ends, never before `start`), each
    centred on the best-scoring passage whose centre no chosen window holds yet, in document order, windows that
    overlap merged. Passages that score nothing are never chosen."""
    return joined(centred(scores, spans, count, size, start, tokens, [], floor=0.0))


def centred(scores: list[float], spans: list[tuple[int, int]], count: int, size: int, start: int, tokens: int,
            chosen: list[tuple[int, int]], floor: float) -> list[tuple[int, int]]:
    """`chosen` and up to `count` more windows, each centred on the best passage (scoring above `floor`) whose
    centre no window holds yet, in the order chosen."""
    chosen, wanted = list(chosen), len(chosen) + count
    for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
        if len(chosen) >= wanted or scores[i] <= floor:
            break
        centre = (spans[i][0] + spans[i][1]) // 2
        if any(first <= centre < end for first, end in chosen):
            continue
        first = max(start, min(centre - size // 2, tokens - size))
        chosen.append((first, min(tokens, first + size)))
    return chosen


def passage_signal(scores: list[float], spans: list[tuple[int, int]], tokens: int) -> torch.Tensor:
    """Each token index's best passage score, (tokens,) float64: where the answer's sources are looked for."""
    signal = torch.zeros(tokens, dtype=torch.float64)
    for score, (first, end) in zip(scores, spans):
        signal[first:end] = signal[first:end].clamp(min=score)
    return signal
