"""What a retrieval baseline hands the model: a document's passages, the top ones up to a token cap, and the window
around an answer's place.

    passages = cut_passages(text)                 # 200 words every 150 words (the last one may be shorter)
    order = ranker.rank(question, passages.texts) # `rankers.py`: best first
    context = fit_passages(passages, order, count, 1024)   # the top ones that fit, in document order
    window = oracle_window(passages, 0.42, count, 1024)    # the words around 42% of the document's characters

`count` counts a text's tokens as the model reads it (`token_counter`), so a context never holds more than the cap:
the top passages are taken whole while they fit, then as many first words of the next one as still fit. Passages
that overlap or touch are joined into one stretch of the document's own text; stretches apart are joined by a blank
line.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from locret_cli.inputs.tokenizer import encode_text

PASSAGE_WORDS = 200
PASSAGE_STRIDE = 150
RAG_TOKENS = 1024  # the default cap: the size of a re-read window (`--reread-tokens`)
MIN_RAG_TOKENS = 64
WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Passages:
    """A document's text, where each of its words starts and ends, and its passages as ranges of words
    (first, past the last)."""

    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]
    texts: tuple[str, ...]

    def stretch(self, first: int, past: int) -> str:
        """The document's own text from word `first` to the word before `past`."""
        return self.text[self.starts[first]:self.ends[past - 1]]

    def joined(self, chosen: Iterable[int]) -> str:
        """The chosen passages in document order, those that overlap or touch as one stretch, the others apart."""
        return self.joined_ranges(self.ranges[i] for i in chosen)

    def joined_ranges(self, ranges: Iterable[tuple[int, int]]) -> str:
        """Ranges of words in document order, those that overlap or touch as one stretch, the others apart."""
        merged: list[list[int]] = []
        for first, past in sorted(ranges):
            if merged and first <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], past)
            else:
                merged.append([first, past])
        return "\n\n".join(self.stretch(first, past) for first, past in merged)

    def word_at(self, place: float) -> int:
        """The word at `place` (0-1) of the document's characters."""
        return max(bisect.bisect_right(self.starts, place * len(self.text)) - 1, 0)


def cut_passages(text: str, words: int = PASSAGE_WORDS, stride: int = PASSAGE_STRIDE) -> Passages:
    """`text` as passages of `words` words, one starting every `stride` words, until one reaches the last word."""
    spans = [match.span() for match in WORD.finditer(text)]
    starts, ends = tuple(s for s, _ in spans), tuple(e for _, e in spans)
    ranges = []
    for first in range(0, max(len(spans), 1), stride):
        ranges.append((first, min(first + words, len(spans))))
        if first + words >= len(spans):
            break
    ranges = [(first, past) for first, past in ranges if past > first]
    return Passages(text, starts, ends, tuple(ranges), tuple(text[starts[a]:ends[b - 1]] for a, b in ranges))


def token_counter(tokenizer) -> Callable[[str], int]:
    """How many tokens the model reads `text` as: `encode_text`, as a document is read (one block up to 64K
    characters, `inputs.documents.token_chunks`)."""
    return lambda text: len(encode_text(tokenizer, text))


def fit_passages(passages: Passages, order: Sequence[int], count: Callable[[str], int], cap: int) -> str:
    """The passages of `order` (best first) taken whole while the joined text stays within `cap` tokens, then the
    most first words of the next one that still fit, in document order."""
    taken: list[tuple[int, int]] = []
    rest = list(order)
    while rest and count(passages.joined_ranges([*taken, passages.ranges[rest[0]]])) <= cap:
        taken.append(passages.ranges[rest.pop(0)])
    if not rest:
        return passages.joined_ranges(taken)
    first, past = passages.ranges[rest[0]]
    words = _most_that_fit(lambda n: count(passages.joined_ranges([*taken, (first, first + n)])), past - first, cap)
    if not words and not taken:
        return _first_characters(passages.stretch(first, first + 1), count, cap)
    return passages.joined_ranges([*taken, (first, first + words)] if words else taken)


def oracle_window(passages: Passages, place: float, count: Callable[[str], int], cap: int) -> str:
    """The longest run of the document's words centred on `place` (0-1 of its characters; moved inwards at either
    end) that stays within `cap` tokens."""
    total = len(passages.starts)
    if total == 0:
        return ""
    centre = passages.word_at(place)
    return _fitting(passages, lambda n: min(max(centre - n // 2, 0), total - max(n, 1)), total, count, cap)


def _fitting(passages: Passages, first_of: Callable[[int], int], most: int, count: Callable[[str], int],
             cap: int) -> str:
    """The most words (up to `most`), starting at word `first_of(n)` for n words, whose text stays within `cap`
    tokens; where not even one word does, as many of that word's first characters as do."""
    n = _most_that_fit(lambda n: count(passages.stretch(first_of(n), first_of(n) + n)), most, cap)
    if n:
        return passages.stretch(first_of(n), first_of(n) + n)
    return _first_characters(passages.stretch(first_of(0), first_of(0) + 1), count, cap)


def _first_characters(word: str, count: Callable[[str], int], cap: int) -> str:
    """As many first characters of `word` as stay within `cap` tokens: a word longer than the cap."""
    return word[:_most_that_fit(lambda n: count(word[:n]), len(word), cap)]


def _most_that_fit(tokens_of: Callable[[int], int], most: int, cap: int) -> int:
    """The largest n in 0..`most` whose text `tokens_of(n)` stays within `cap` (0: none does), found by halving: a
    longer text has at least as many tokens."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if tokens_of(middle) <= cap:
            low = middle
        else:
            high = middle - 1
    return low
