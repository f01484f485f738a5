"""Where each token of a document came from, so a cache entry's origin can be named as a page or a line range.

A document is cut into units: a PDF's pages, or a text's paragraphs (runs of non-blank lines, at most
`MAX_PARAGRAPH_LINES` each) named by their line range. `SourceMap` records the first token index of every unit as
the document is tokenized; `unit_of` maps token indices (the cache's `origins`) back to units.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where tensors are mapped, so that opening a document does not import it
    import torch

MAX_PARAGRAPH_LINES = 40  # a longer run of lines without a blank one is cut into several units


@dataclass(frozen=True)
class Source:
    """A unit an answer drew on: a page, or lines first_line..last_line (1-based), with its share of attention, and
    whether its text holds the answer's specific content (`checks/grounding.py`)."""

    weight: float
    page: int | None = None
    first_line: int | None = None
    last_line: int | None = None
    holds_answer: bool = False

    def label(self) -> str:
        if self.page is not None:
            return f"p. {self.page}"
        if self.first_line == self.last_line:
            return f"line {self.first_line}"
        return f"lines {self.first_line}-{self.last_line}"

    def to_json(self) -> dict:
        where = {"page": self.page} if self.page is not None else {"lines": [self.first_line, self.last_line]}
        return {**where, "weight": round(self.weight, 4), "holds_answer": self.holds_answer}


@dataclass
class SourceMap:
    """Units of one document in token order. kind "page": first == last == the page number; kind "lines": the unit
    spans lines first..last. starts[i] is the token index (in the whole input, prompt head included) where unit i
    begins; tokens before starts[0] are the prompt's, not the document's."""

    kind: str
    starts: list[int] = field(default_factory=list)
    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    # text walking state: the line being read, whether it has shown text yet, whether a paragraph is open
    _line: int = field(default=1, compare=False, repr=False)
    _line_has_text: bool = field(default=False, compare=False, repr=False)
    _paragraph_open: bool = field(default=False, compare=False, repr=False)

    def add_page(self, token: int, page: int) -> None:
        """Page `page` starts at token index `token`."""
        self._add(token, page, page)

    def add_text(self, token: int, text: str, offsets: list[int]) -> None:
        """Record the paragraphs in `text`, the next piece of a text document; its first id is token index `token`
        and offsets[i] is where its i-th token starts in `text`. Pieces may end mid-line."""
        position = 0
        for number, segment in enumerate(text.split("\n")):
            if number:  # a newline ended the previous line
                if not self._line_has_text:
                    self._paragraph_open = False
                self._line, self._line_has_text = self._line + 1, False
            stripped = segment.lstrip()
            if stripped and not self._line_has_text:
                self._line_has_text = True
                if not self._paragraph_open or self._line - self.first[-1] >= MAX_PARAGRAPH_LINES:
                    at = position + len(segment) - len(stripped)
                    self._add(token + max(bisect_right(offsets, at) - 1, 0), self._line, self._line)
                    self._paragraph_open = True
                self.last[-1] = self._line
            position += len(segment) + 1

    def _add(self, token: int, first: int, last: int) -> None:
        if self.starts and token <= self.starts[-1]:  # the same token opens both: the units merge
            self.last[-1] = last
            return
        self.starts.append(token)
        self.first.append(first)
        self.last.append(last)

    def __len__(self) -> int:
        return len(self.starts)

    def unit_of(self, origins: torch.Tensor) -> torch.Tensor:
        """Unit index of each token index in `origins` (any shape), -1 for the prompt's tokens before the document."""
        import torch

        starts = torch.tensor(self.starts, dtype=torch.int64, device=origins.device)
        return torch.bucketize(origins.to(torch.int64), starts, right=True) - 1

    def source(self, unit: int, weight: float) -> Source:
        if self.kind == "page":
            return Source(weight, page=self.first[unit])
        return Source(weight, first_line=self.first[unit], last_line=self.last[unit])

    def labels(self) -> list[str]:
        return [self.source(i, 0.0).label() for i in range(len(self))]


def units_weighted(source_map: SourceMap, origins: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Sum of `weights` per unit, over entries whose `origins` lie in the document (same shapes). Returns (units,)
    float64."""
    import torch

    units = source_map.unit_of(origins).flatten()
    inside = (units >= 0) & (units < len(source_map))
    totals = torch.zeros(len(source_map), dtype=torch.float64, device=origins.device)
    return totals.index_add_(0, units[inside], weights.flatten()[inside].to(torch.float64)).cpu()


def units_best(source_map: SourceMap, per_token: torch.Tensor) -> torch.Tensor:
    """The highest of `per_token` (tokens,) among each unit's tokens: (units,) float64. Unlike `units_weighted`'s
    sum, a long paragraph does not outweigh the short line that holds what was looked for."""
    import torch

    units = source_map.unit_of(torch.arange(len(per_token)))
    inside = (units >= 0) & (units < len(source_map))
    best = torch.zeros(len(source_map), dtype=torch.float64)
    return best.scatter_reduce(0, units[inside], per_token[inside].to(torch.float64), "amax")


def top_sources(source_map: SourceMap, unit_weights: torch.Tensor, count: int) -> list[Source]:
    """The `count` units with most weight, as shares of the weight on the whole document, best first."""
    total = float(unit_weights.sum())
    if total <= 0 or not len(source_map):
        return []
    best = unit_weights.topk(min(count, len(source_map)))
    return [source_map.source(int(i), float(w) / total) for w, i in zip(best.values, best.indices) if w > 0]


def answer_first(cited: list[Source], holding: list[int], source_map: SourceMap, count: int) -> list[Source]:
    """`cited` with the units in `holding` (those whose text holds the answer's content, in the order found) first
    and marked, each keeping its share of attention (0 where the answer paid it none), then the rest; `count` in
    all."""
    by_label = {source.label(): source for source in cited}
    first = []
    for unit in dict.fromkeys(holding):
        label = source_map.source(unit, 0.0).label()
        weight = by_label.pop(label).weight if label in by_label else 0.0
        first.append(replace(source_map.source(unit, weight), holds_answer=True))
    return (first + list(by_label.values()))[:count]


@dataclass
class TokenChunk:
    """Up to chunk_size token ids and the input they came from."""

    ids: list[int]
    first_page: int | None
    last_page: int | None
    units_done: int
