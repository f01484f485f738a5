"""A bounded read left for later: the document tokenized, its chunks remembered, the read run only if asked for.

With the question's words locating the windows an answer is read from (`routes.LocatedWindows`), the bounded
cache serves only questions that name no window. `Session.read(defer=True)` therefore tokenizes the document and
keeps a `PendingRead`; `Reading.read_now` runs it, once, when an answer (or a saved context, or a kept map) needs
the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import torch

from locret_cli.core.engine import Progress
from locret_cli.inputs.sources import TokenChunk


@dataclass
class PendingRead:
    """A bounded read left for later: each chunk's length in tokens, and the chunk as the document gave it (its
    ids emptied: the Reading's `input_ids` hold them)."""

    lengths: list[int]
    places: list[TokenChunk]

    @classmethod
    def tokenize(cls, chunks: Iterable[TokenChunk], on_progress: Callable[[Progress], None] | None) -> "PendingRead":
        """Walk `chunks` to the end (tokenizing the document), reporting progress as a read would, marked as not
        reading, with an empty cache."""
        pending, tokens = cls([], []), 0
        for chunk in chunks:
            tokens += len(chunk.ids)
            pending.lengths.append(len(chunk.ids))
            pending.places.append(TokenChunk([], chunk.first_page, chunk.last_page, chunk.units_done))
            if on_progress:
                on_progress(Progress(tokens, chunk.units_done, chunk.first_page, chunk.last_page, 0, reading=False))
        return pending

    def chunks(self, input_ids: torch.Tensor) -> Iterator[TokenChunk]:
        """The chunks again, their ids taken from `input_ids` (every token of the input, in order)."""
        start = 0
        for length, place in zip(self.lengths, self.places):
            yield TokenChunk(input_ids[start:start + length].tolist(), place.first_page, place.last_page,
                             place.units_done)
            start += length


def sized(on_progress: Callable[[Progress], None] | None, unit: str,
          total: int | None) -> Callable[[Progress], None] | None:
    """`on_progress`, hearing each event with the document's `unit` ("pages" or "bytes") and `total` of them, so
    that a progress bar can size itself from the first event."""
    if on_progress is None:
        return None
    return lambda event: on_progress(replace(event, unit=unit, units_total=total))
