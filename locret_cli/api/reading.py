"""A document read once into a bounded cache, then asked any number of questions, each on a fork of the cache.

    reading = session.read("book.pdf")
    for question in ("Who signed the treaty?", "When?"):
        result = reading.ask(question)
        print(result.answer, [s.label() for s in result.sources])

`Session.open` builds one: it reads the document (`Session.read`) or loads a `.locret` file
(`saved_context.load_reading`) without reading the document again. Every answer sees the same kept entries. They
depend on no question, unless the policy read the document for its questions (finch, `read_for`): such a cache
serves those questions best and later ones worse.

A Reading built with `Session.read(defer=True)` has tokenized the document but not run its bounded read
(`pending`): answers located in the document's text (`--locate` words, bm25) come from re-read windows alone
(`routes.LocatedWindows`), so the read runs (`read_now`) only when an answer's route needs the cache, and at most
once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from locret_cli.api.answer import AnswerGrounding, AskResult, CacheUse, ContextOrigin, DocumentInfo, MemoryUse, Speed
from locret_cli.api.answer_checks import Checked, check_answer
from locret_cli.api.pending_read import PendingRead, sized
from locret_cli.api.question_room import check_positions, check_prefill_fits
from locret_cli.api.routes import DraftAnswer, ReadDocument, Turn, route_for
from locret_cli.checks.grounding import REFUSAL, DocumentText
from locret_cli.core.answer.answerable import with_answerable_check
from locret_cli.core.answer.citations import kept_per_unit
from locret_cli.core.engine import Engine, Progress
from locret_cli.core.measure import cache_by_kind, full_cache_bytes, peak_memory
from locret_cli.core.policies import POLICIES
from locret_cli.errors import LocretError
from locret_cli.inputs.document_numbers import DocumentNumbers, NumberTokens
from locret_cli.inputs.prompt import conversation_ids, with_unstated_reply
from locret_cli.inputs.questions import check_question
from locret_cli.inputs.sources import SourceMap
from locret_cli.models.loading import QuestionForms
from locret_cli.settings import AnswerSettings, ReadSettings

SOURCES_SHOWN = 3
NUMBERS_NEED_TOKENS = ("--numbers-from-document needs the document's tokens, which this context was saved without: "
                       "the answer may give any number (read the document again to keep them)")


@dataclass
class Reading:
    """A read document: the engine holding its bounded cache, the prompt head read before it, and where each of
    its tokens came from. `ask` never changes it."""

    engine: Engine
    tokenizer: object
    model_name: str
    prefix_ids: list[int]
    source_map: SourceMap
    document: DocumentInfo
    read_s: float
    loaded_from: str | None = None
    warnings: list[str | LocretError] = field(default_factory=list)  # a SettingError names its settings by `render`
    compute: str = ""  # how the model computes (`Session.ready_to_compute`)
    question_forms: QuestionForms | None = None  # the question forms a model was trained on, and its "not stated" reply
    input_ids: torch.Tensor | None = None  # (tokens,) every token read, prompt head first: what re-reading reads
    read_for: tuple[str, ...] = ()  # the questions that steered the read (finch, guided locret); empty: agnostic
    pending: PendingRead | None = None  # the bounded read, when it has not run yet (`read_now`)
    read_stopped: bool = False  # a pending read was stopped part-way: the cache holds part of the document
    _text: DocumentText | None = field(default=None, repr=False)  # `document_text()`, once built
    _numbers: DocumentNumbers | None = field(default=None, repr=False)  # `document_numbers()`, once built

    def read_now(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        """Run the bounded read left pending by `Session.read(defer=True)`, once; nothing when it has run. Refuses
        (LocretError) once such a read was stopped part-way (Ctrl-C in a chat): its cache holds part of the
        document."""
        if self.read_stopped:
            raise LocretError("the document's bounded read was stopped part-way; open the document again")
        if self.pending is None:
            return
        started = self.engine.clock()
        try:
            self.engine.read(self.pending.chunks(self.input_ids), sized(on_progress, *self.document.extent()))
        except BaseException:
            self.read_stopped = True
            raise
        self.pending = None
        took = self.engine.clock() - started
        self.read_s += took
        self.document.read_s += took

    def answer_warnings(self, question: str, answering: AnswerSettings | None = None) -> list[str]:
        """Warnings about answering `question` with `answering` (None: the recorded settings): a question the model
        was not trained to answer (embedded model), or a setting this Reading cannot honour."""
        warning = self.question_forms.warning(question) if self.question_forms else None
        warnings = [warning] if warning else []
        if (answering or self.answering).numbers_from_document and self.input_ids is None:
            warnings.append(NUMBERS_NEED_TOKENS)
        return warnings

    @property
    def settings(self) -> ReadSettings:
        """The settings the document was read with."""
        return self.engine.settings

    @property
    def answering(self) -> AnswerSettings:
        """The settings answers use unless `ask` is given others: the model's recorded defaults."""
        return self.engine.answering

    def ask(
        self,
        question: str,
        answering: AnswerSettings | None = None,
        sources: int = SOURCES_SHOWN,
        on_token: Callable[[int], None] | None = None,
        history: Sequence[tuple[str, str]] = (),
        on_read: Callable[[Progress], None] | None = None,
    ) -> AskResult:
        """Answer `question` on a fork of the cache, after the earlier `history` turns (question, answer), if any.

        The answer's settings choose its route (`routes.route_for`); the answer is then checked against the document
        (`answer_checks.check_answer`). `sources` > 0 also names that many pages or line ranges the answer drew on;
        0 skips the cost. A bounded read left pending runs first if the route needs the cache, reporting to
        `on_read` (so a caller's progress bar opens only then)."""
        check_question(question)
        chosen = answering or self.answering
        numbers = self.document_numbers() if chosen.numbers_from_document else None
        asked = with_unstated_reply(question, REFUSAL) if chosen.say_unstated else question
        check_ids = conversation_ids(self.tokenizer, history, with_answerable_check(question)) \
            if chosen.answerable_below > 0 and chosen.reread > 0 else None
        turn = Turn(question, conversation_ids(self.tokenizer, history, asked), chosen, sources, on_token, on_read,
                    numbers, check_ids)
        self.check_room(question, len(turn.question_ids), chosen)
        document = self.view()
        drafted = route_for(chosen).answer(document, turn)
        return self._result(turn, drafted, check_answer(document, question, drafted, sources))

    def check_room(self, question: str, tokens: int, answering: AnswerSettings) -> None:
        """Refuse, in one line, a `question` of `tokens` that passes the model's positions after this cache, or whose
        prefill would not fit in free memory (`question_room.py`): before a pending read runs."""
        evicts = POLICIES[self.settings.policy].evicts
        cached = self.engine.cache.length() if self.pending is None else \
            min(self.settings.budget, len(self.input_ids)) if evicts else len(self.input_ids)
        kept = cached if evicts and self.settings.positions == "compact" else 0
        check_positions(self.engine.model, answering, tokens, question, kept)
        check_prefill_fits(self.engine.model, cached, tokens, answering, self.settings.kv_bits)

    def view(self) -> ReadDocument:
        """What the routes and the answer's checks see of this reading."""
        return ReadDocument(self.engine, self.tokenizer, self.input_ids, self.source_map, self.question_forms,
                            self.document_text, self.read_now)

    def _result(self, turn: Turn, drafted: DraftAnswer, checked: Checked) -> AskResult:
        generation, engine = drafted.generation, drafted.engine
        answer_s = generation.time_to_first_token_s + generation.decode_s
        memory = MemoryUse(*peak_memory(engine.model.device))
        read_tokens = 0 if self.loaded_from or self.pending else self.engine.document_tokens
        read_tokens += drafted.tokens_read
        all_tokens = len(self.prefix_ids) + self.document.tokens + len(turn.question_ids) + len(generation.token_ids)
        return AskResult(
            question=turn.question,
            answer=checked.answer,
            sources=checked.sources,
            model=self.model_name,
            document=self.document,
            context=ContextOrigin(self.loaded_from),
            settings=self.settings,
            answering=engine.answering,
            policy=self.settings.policy,
            read_for=self.read_for,
            route=drafted.route,
            reader=None if engine.reader is None else engine.reader.source,
            grounding=AnswerGrounding(checked.grounding, checked.withheld, checked.restated_from, drafted.answerable),
            kv_cache=CacheUse(
                holds_document=self.pending is None,
                kept_tokens=self.kept_tokens,
                lazy_pruned_tokens=self.engine.pruned_tokens,
                peak_tokens=max(self.engine.cache.peak_tokens, engine.cache.peak_tokens),
                peak_bytes=max(self.engine.cache.peak_bytes, engine.cache.peak_bytes),
                full_cache_bytes=full_cache_bytes(engine.model, all_tokens),
                by_kind=cache_by_kind(engine.model, (self.engine.cache, engine.cache), all_tokens),
            ),
            memory=memory,
            speed=Speed(
                read_s=self.read_s,
                answer_s=answer_s,
                decode_s=generation.decode_s,
                decode_steps=generation.decode_steps,
                prefill_tokens_per_s=(read_tokens + len(turn.question_ids)) /
                (self.read_s + generation.time_to_first_token_s),
                decode_tokens_per_s=generation.decode_steps / generation.decode_s if generation.decode_steps else None,
                time_to_first_token_s=self.read_s + generation.time_to_first_token_s,
                total_s=self.read_s + answer_s,
                compute=self.compute,
            ),
            windows=drafted.windows,
            warnings=[str(w) for w in self.warnings] + self.answer_warnings(turn.question, turn.answering),
        )

    @property
    def kept_tokens(self) -> int:
        """Entries per KV head the bounded cache holds (0 while its read is pending)."""
        return self.engine.kept_tokens

    def document_text(self) -> DocumentText:
        """The document's words page by page (or by line range), decoded from the tokens read; built once."""
        if self._text is None:
            ids, starts = self.input_ids.tolist(), self.source_map.starts
            ends = starts[1:] + [len(ids)]
            texts = [self.tokenizer.decode(ids[a:b], skip_special_tokens=True) for a, b in zip(starts, ends)]
            self._text = DocumentText(texts, self.source_map.labels())
        return self._text

    def document_numbers(self) -> DocumentNumbers | None:
        """The numbers the document holds, as `numbers_from_document` keeps answers to them; built once. None for a
        context saved without its tokens."""
        if self._numbers is None and self.input_ids is not None:
            self._numbers = DocumentNumbers.of(self.document_text().where, NumberTokens.of(self.tokenizer))
        return self._numbers

    def kept_map(self) -> tuple[list[str], list[float]]:
        """Each page or line range of the document, and how many of its entries the cache kept (averaged over
        layers and KV heads)."""
        self.read_now()
        kept = kept_per_unit(self.engine.cache, self.source_map, self.engine.kept_tokens)
        return self.source_map.labels(), kept.tolist()
