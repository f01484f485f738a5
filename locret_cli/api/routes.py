"""The ways an answer is made from a read document: one small class per route, one `answer()` each.

- `BoundedCache` ("bounded-cache"): the answer reads the document's bounded cache, on a fork of it, and cites the
  pages its attention went to. A bounded read left pending runs first.
- `LocatedWindows` ("windows"): the answer reads a few windows of the document again, whole, with a full cache, where
  the question's words (or the bounded cache's attention) locate it (`reread.py`); when nothing locates a window,
  `BoundedCache` answers. With `fallback` "unspecific", so it does when the windows' answer names nothing the
  document holds (no number, name or code found in it) and its own answer does; with "unstated", also when the
  document holds the windows' answer but does not state it in a sentence naming all the question names, and states
  the bounded cache's.

`route_for(answering)` names the route an answer's settings choose; `Reading.ask` runs it, then checks the answer
(`answer_checks.py`). A model's reader (`core/answer/reader.py`) is in force wherever the bounded cache answers; a second
hop is `reread.py`'s; a new route is one more class here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from locret_cli.checks.grounding import DocumentText, ground
from locret_cli.core.answer.citations import AttentionTally
from locret_cli.core.answer.reread import Window, answer_from_windows
from locret_cli.core.engine import Engine, Generation, Progress
from locret_cli.errors import SettingError
from locret_cli.inputs.document_numbers import DocumentNumbers
from locret_cli.inputs.sources import Source, SourceMap
from locret_cli.models.loading import QuestionForms
from locret_cli.settings import TEXT_LOCATES, AnswerSettings


@dataclass(frozen=True)
class ReadDocument:
    """What a route and the answer's checks see of a read document (`Reading.view`): the engine holding its bounded
    cache, whose read may still be pending; the tokenizer; every token read (None for a context saved without them)
    and where each came from; the model's question forms; the document's text (built once, on the first call); and
    `read_now`, which runs a pending bounded read, reporting to its callback."""

    engine: Engine
    tokenizer: object
    input_ids: torch.Tensor | None
    source_map: SourceMap
    question_forms: QuestionForms | None
    text: Callable[[], DocumentText]
    read_now: Callable[[Callable[[Progress], None] | None], None]


@dataclass
class Turn:
    """One question to answer: its text, its ids in the chat layout (after any earlier turns), the settings, how many
    sources to name, who hears the answer's tokens and a pending read's progress, the document's numbers (for
    `numbers_from_document`; None: any number), and the question as `answerable_below` asks it (None: not asked)."""

    question: str
    question_ids: list[int]
    answering: AnswerSettings
    sources: int
    on_token: Callable[[int], None] | None = None
    on_read: Callable[[Progress], None] | None = None
    numbers: DocumentNumbers | None = None
    check_ids: list[int] | None = None


@dataclass
class DraftAnswer:
    """What a route produced, before the answer is checked: the generation, the engine that answered (a fork of the
    reading's, or one over re-read windows), the sources it cited (None: not computed), the windows read again
    (None: none), the tokens it read itself, the route that answered, and the model's share of yes when asked
    whether the windows answer the question (None: not asked)."""

    generation: Generation
    engine: Engine
    sources: list[Source] | None
    windows: list[Window] | None
    tokens_read: int
    route: str
    answerable: float | None = None


class Route:
    """How an answer is made from a read document."""

    name: ClassVar[str]

    def answer(self, document: ReadDocument, turn: Turn) -> DraftAnswer:
        raise NotImplementedError


class BoundedCache(Route):
    """The answer reads the bounded cache (its pending read runs first), on a fork; its attention to the kept entries
    names the sources."""

    name = "bounded-cache"

    def answer(self, document: ReadDocument, turn: Turn) -> DraftAnswer:
        document.read_now(turn.on_read)
        engine = document.engine.fork(turn.answering)
        tally = AttentionTally(len(engine.cache.layers), document.engine.kept_tokens) if turn.sources > 0 else None
        generation = engine.answer(turn.question_ids, on_token=turn.on_token, tally=tally, numbers=turn.numbers)
        cited = tally.sources(document.engine.cache, engine.cache, document.source_map, turn.sources) if tally else None
        return DraftAnswer(generation, engine, cited, None, 0, self.name)


class LocatedWindows(Route):
    """The answer reads `reread` windows of the document again, whole; `BoundedCache` answers when none is located.
    Windows located by the document's text alone (`--locate` words or bm25) never need the bounded read; attention
    needs it first."""

    name = "windows"

    def answer(self, document: ReadDocument, turn: Turn) -> DraftAnswer:
        if document.input_ids is None:
            raise SettingError("{reread} needs the document's tokens, which this context was saved without: read the "
                               "document again")
        if turn.answering.locate not in TEXT_LOCATES:
            document.read_now(turn.on_read)
        required = FALLBACK_LEVELS.get(turn.answering.fallback, 0)  # how well the windows' answer must be grounded
        checks = required > 0
        second = answer_from_windows(document.engine, document.tokenizer, document.input_ids, document.source_map,
                                     turn.question, turn.question_ids, turn.answering, turn.sources,
                                     None if checks else turn.on_token, turn.numbers, turn.check_ids)
        if second is None:
            return BoundedCache().answer(document, turn)
        second.generation.time_to_first_token_s += second.extra_s
        drafted = DraftAnswer(second.generation, second.engine, second.sources, second.windows,
                              second.engine.document_tokens, self.name, second.answerable)
        grounded = how_document_holds(document, turn.question, drafted) if checks else 0
        if grounded < required:
            cached = BoundedCache().answer(document, replace(turn, on_token=None))
            if how_document_holds(document, turn.question, cached) > grounded:
                spent = second.generation.time_to_first_token_s + second.generation.decode_s
                cached.generation.time_to_first_token_s += spent
                cached.windows, cached.tokens_read = drafted.windows, drafted.tokens_read
                drafted = cached
        if checks and turn.on_token:
            for token in drafted.generation.token_ids:
                turn.on_token(token)
        return drafted


FALLBACK_LEVELS = {"unspecific": 1, "unstated": 2}  # `--fallback`: the level below which the bounded cache answers too


def how_document_holds(document: ReadDocument, question: str, drafted: DraftAnswer) -> int:
    """2 where `drafted`'s answer is stated in the document (its specific content in a sentence naming all that the
    question names), 1 where the document holds that content near what the question names, else 0."""
    answer = document.tokenizer.decode(drafted.generation.token_ids, skip_special_tokens=True)
    return ground(question, answer, document.text()).level


def route_for(answering: AnswerSettings) -> Route:
    """The route `answering` chooses: re-read windows when `reread` > 0, else the bounded cache."""
    return LocatedWindows() if answering.reread > 0 else BoundedCache()
