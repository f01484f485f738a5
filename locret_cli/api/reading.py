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
(`pending`): answers located by the question's words come from re-read windows alone (`reread.answers_from_windows`),
so the read runs (`read_now`) only when an answer needs the cache, and at most once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from locret_cli.api.answer import AskResult, DocumentInfo
from locret_cli.api.pending_read import PendingRead
from locret_cli.api.reread import answers_from_windows, locate, reread
from locret_cli.core.citations import AttentionTally, kept_per_unit
from locret_cli.core.engine import Engine, Progress
from locret_cli.core.measure import full_cache_bytes, peak_memory
from locret_cli.core.settings import AnswerSettings, ReadSettings
from locret_cli.core.sources import SourceMap, answer_first
from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.grounding import REFUSAL, DocumentText, Grounding, ground
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.inputs.questions import check_question
from locret_cli.inputs.tokenizer import encode_text
from locret_cli.models.loading import QuestionForms

SOURCES_SHOWN = 3


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
    warnings: list[str] = field(default_factory=list)
    compute: str = ""  # how the model computes (`Session.pack_weights`)
    forms: QuestionForms | None = None  # the question forms a model was trained on, and its "not stated" reply
    input_ids: torch.Tensor | None = None  # (tokens,) every token read, prompt head first: what re-reading reads
    read_for: tuple[str, ...] = ()  # the questions that steered the read (finch); empty: question-agnostic
    pending: PendingRead | None = None  # the bounded read, when it has not run yet (`read_now`)
    read_cut: bool = False  # a pending read was stopped part-way: the cache holds part of the document
    _text: DocumentText | None = field(default=None, repr=False)  # `document_text()`, once built

    def needs_read(self, question: str, answering: AnswerSettings | None = None,
                   history: Sequence[tuple[str, str]] = ()) -> bool:
        """Whether `ask(question, answering, history=history)` would run the pending bounded read: its settings read
        the cache, or the question's words name no window."""
        if self.pending is None:
            return False
        chosen = answering or self.answering
        if not answers_from_windows(chosen):
            return True
        question_ids = conversation_ids(self.tokenizer, history, question)
        spans, _, _ = locate(self.engine, self.input_ids, self.engine.pinned, question_ids,
                             encode_text(self.tokenizer, question), chosen)
        return not spans

    def read_now(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        """Run the bounded read left pending by `Session.read(defer=True)`, once; nothing when it has run. Refuses
        (LocretError) once such a read was stopped part-way (Ctrl-C in a chat): its cache holds part of the
        document."""
        if self.read_cut:
            raise LocretError("the document's bounded read was stopped part-way; open the document again")
        if self.pending is None:
            return
        started = self.engine.clock()
        try:
            self.engine.read(self.pending.chunks(self.input_ids), on_progress)
        except BaseException:
            self.read_cut = True
            raise
        self.pending = None
        took = self.engine.clock() - started
        self.read_s += took
        self.document.read_s += took

    def question_warnings(self, question: str) -> list[str]:
        """Warnings about `question` itself: a question the model was not trained to answer (embedded model)."""
        warning = self.forms.warning(question) if self.forms else None
        return [warning] if warning else []

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

        `sources` > 0 also names that many pages or line ranges the answer drew on; 0 skips the cost. An answer
        that the document does not say (`not_stated`) cites none. A bounded read left pending runs first if this
        answer needs it (`needs_read` says so beforehand), reporting to `on_read`."""
        check_question(question)
        question_ids = conversation_ids(self.tokenizer, history, question)
        chosen, second = answering or self.answering, None
        if not answers_from_windows(chosen):
            self.read_now(on_read)
        if chosen.reread:
            if self.input_ids is None:
                raise SettingError("{reread} needs the document's tokens, which this context was saved without: "
                                   "read the document again")
            second = reread(self.engine, self.tokenizer, self.input_ids, self.source_map, question, question_ids,
                            chosen, sources, on_token)
        if second is not None:
            generation, engine, cited, windows = second.generation, second.engine, second.sources, second.windows
            generation.time_to_first_token_s += second.extra_s
        else:
            self.read_now(on_read)  # no window named: the bounded cache answers
            engine = self.engine.fork(answering)
            tally = AttentionTally(len(engine.cache.layers), self.engine.kept_tokens) if sources > 0 else None
            generation = engine.answer(question_ids, on_token=on_token, tally=tally)
            cited = tally.sources(self.engine.cache, engine.cache, self.source_map, sources) if tally else None
            windows = None
        answer_s = generation.time_to_first_token_s + generation.decode_s
        model = engine.model
        memory, memory_device = peak_memory(model.device)
        read_tokens = 0 if self.loaded_from or self.pending else self.engine.document_tokens
        read_tokens += second.engine.document_tokens if second is not None else 0
        all_tokens = len(self.prefix_ids) + self.document.tokens + len(question_ids) + len(generation.token_ids)
        answer = self.tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
        cut = len(generation.token_ids) >= engine.answering.max_new_tokens
        grounding = ground(question, answer, self.document_text(), cut) if self.input_ids is not None else None
        withheld = None
        if engine.answering.strict and self.untrusted(question, answer, grounding, cut):
            answer, withheld = REFUSAL, answer
        if answer == REFUSAL or (self.forms and self.forms.says_not_stated(answer)):
            cited = None
        elif cited and grounding is not None:
            cited = answer_first(cited, grounding.units(), self.source_map, sources)
        return AskResult(
            question=question,
            answer=answer,
            sources=cited if cited is not None else [] if sources > 0 else None,
            model=self.model_name,
            policy=self.engine.policy.name,
            settings=self.settings,
            answering=engine.answering,
            document=self.document,
            holds_document=self.pending is None,
            cache_kept_tokens=self.engine.kept_tokens,
            lazy_pruned_tokens=self.engine.pruned_tokens,
            cache_peak_tokens=max(self.engine.cache.peak_tokens, engine.cache.peak_tokens),
            cache_peak_bytes=max(self.engine.cache.peak_bytes, engine.cache.peak_bytes),
            full_cache_bytes=full_cache_bytes(model, all_tokens),
            memory_peak_bytes=memory,
            memory_device=memory_device,
            read_s=self.read_s,
            loaded_from=self.loaded_from,
            answer_s=answer_s,
            decode_s=generation.decode_s,
            decode_steps=generation.decode_steps,
            prefill_tokens_per_s=(read_tokens + len(question_ids)) / (self.read_s + generation.time_to_first_token_s),
            decode_tokens_per_s=generation.decode_steps / generation.decode_s if generation.decode_steps else None,
            time_to_first_token_s=self.read_s + generation.time_to_first_token_s,
            total_s=self.read_s + answer_s,
            warnings=list(self.warnings) + self.question_warnings(question),
            compute=self.compute,
            reread=windows,
            read_for=self.read_for,
            grounding=grounding,
            withheld=withheld,
        )

    def untrusted(self, question: str, answer: str, grounding: Grounding | None, cut: bool) -> bool:
        """Whether a strict answer must be withheld: its content is not in the document as written; or the model
        cannot answer a question of this form (the embedded model's out-of-form questions); or a model that answers
        only with a value (the embedded one) gave none ("The water ration of the old library is."), without the
        token limit to blame."""
        if grounding is not None and not grounding.grounded:
            return True
        if self.forms is None:
            return False
        no_value = grounding is not None and grounding.status == "n/a" and not cut and \
            not self.forms.says_not_stated(answer)
        return no_value or bool(self.question_warnings(question))

    def document_text(self) -> DocumentText:
        """The document's words page by page (or by line range), decoded from the tokens read; built once."""
        if self._text is None:
            ids, starts = self.input_ids.tolist(), self.source_map.starts
            ends = starts[1:] + [len(ids)]
            texts = [self.tokenizer.decode(ids[a:b], skip_special_tokens=True) for a, b in zip(starts, ends)]
            self._text = DocumentText(texts, self.source_map.labels())
        return self._text

    def kept_map(self) -> tuple[list[str], list[float]]:
        """Each page or line range of the document, and how many of its entries the cache kept (averaged over
        layers and KV heads)."""
        self.read_now()
        kept = kept_per_unit(self.engine.cache, self.source_map, self.engine.kept_tokens)
        return self.source_map.labels(), kept.tolist()

