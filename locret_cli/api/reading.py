"""A document read once into a bounded cache, then asked any number of questions, each on a fork of the cache.

    reading = session.read("book.pdf")
    for question in ("Who signed the treaty?", "When?"):
        result = reading.ask(question)
        print(result.answer, [s.label() for s in result.sources])

`Session.open` builds one: it reads the document (`Session.read`) or loads a `.locret` file
(`saved_context.load_reading`) without reading the document again. Every answer sees the same kept entries. They
depend on no question, unless the policy read the document for its questions (finch, `read_for`): such a cache
serves those questions best and later ones worse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from locret_cli.api.reread import Window, reread
from locret_cli.core.citations import AttentionTally, kept_per_unit
from locret_cli.core.engine import Engine
from locret_cli.core.measure import full_cache_bytes, peak_memory
from locret_cli.core.settings import AnswerSettings, ReadSettings
from locret_cli.core.sources import Source, SourceMap, answer_first
from locret_cli.errors import SettingError
from locret_cli.inputs.grounding import REFUSAL, DocumentText, Grounding, ground
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.inputs.questions import check_question
from locret_cli.models.loading import QuestionForms

SOURCES_SHOWN = 3


@dataclass
class DocumentInfo:
    """What was read: its name, kind ("pdf" or "text"), document tokens (prompt head excluded), pages, the SHA-256
    and size of its bytes, and how long reading it took (in whichever process read it)."""

    name: str
    kind: str
    tokens: int
    pages: int | None
    sha256: str | None
    size_bytes: int | None
    read_s: float

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "tokens": self.tokens, "pages": self.pages,
                "sha256": self.sha256, "size_bytes": self.size_bytes, "read_s": self.read_s}


@dataclass
class AskResult:
    """An answer, the pages or lines it drew on, and everything it cost. `to_json()` is the `--json` document."""

    question: str
    answer: str
    sources: list[Source] | None  # None when not computed (--no-sources)
    model: str
    policy: str
    settings: ReadSettings
    answering: AnswerSettings
    document: DocumentInfo
    cache_kept_tokens: int
    lazy_pruned_tokens: int  # document tokens lazy prefill ran through only the first `lazy_after` layers
    cache_peak_tokens: int
    cache_peak_bytes: int
    full_cache_bytes: int
    memory_peak_bytes: int
    memory_device: str
    read_s: float  # reading the document, or loading its saved context, in this process
    loaded_from: str | None  # the .locret file the reading came from, if any
    answer_s: float  # question prefill and decoding
    decode_s: float
    decode_steps: int
    prefill_tokens_per_s: float  # tokens prefilled in this process (document and question) per second
    decode_tokens_per_s: float | None
    time_to_first_token_s: float  # from the start of reading (or loading) to the first answer token
    total_s: float  # read_s + answer_s
    warnings: list[str] = field(default_factory=list)
    compute: str = ""  # the dtype and why, and whether linears were packed
    reread: list[Window] | None = None  # the windows read again for this answer (`api/reread.py`), if any
    read_for: tuple[str, ...] = ()  # the questions that steered the read; empty: a question-agnostic read
    grounding: Grounding | None = None  # the answer's content checked against the document's text
    withheld: str | None = None  # the model's answer, when `strict` replaced it with REFUSAL

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "sources": None if self.sources is None else [s.to_json() for s in self.sources],
            "model": self.model,
            "document": self.document.to_json(),
            "context": {"loaded_from": self.loaded_from},
            "budget": self.settings.budget,
            "chunk_size": self.settings.chunk_size,
            "stabilizers": self.settings.stabilizers,
            "score_pool": self.settings.score_pool,
            "span": self.settings.span,
            "kv_bits": self.settings.kv_bits,
            "lazy_after": self.settings.lazy_after,
            "lazy_share": self.settings.lazy_share,
            "positions": self.settings.positions,
            "policy": self.policy,
            "read_for": list(self.read_for),
            "grounding": None if self.grounding is None else {**self.grounding.to_json(), "withheld": self.withheld},
            "kv_cache": {
                "kept_tokens": self.cache_kept_tokens,
                "lazy_pruned_tokens": self.lazy_pruned_tokens,
                "peak_tokens": self.cache_peak_tokens,
                "peak_bytes": self.cache_peak_bytes,
                "full_cache_bytes": self.full_cache_bytes,
            },
            "memory": {"peak_bytes": self.memory_peak_bytes, "device": self.memory_device},
            "speed": {
                "read_s": self.read_s,
                "answer_s": self.answer_s,
                "prefill_tokens_per_s": self.prefill_tokens_per_s,
                "decode_tokens_per_s": self.decode_tokens_per_s,
                "time_to_first_token_s": self.time_to_first_token_s,
                "total_s": self.total_s,
                "compute": self.compute,
            },
            "reread": None if self.reread is None else [w.to_json() for w in self.reread],
            "warnings": self.warnings,
        }


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
    _text: DocumentText | None = field(default=None, repr=False)  # `document_text()`, once built

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
    ) -> AskResult:
        """Answer `question` on a fork of the cache, after the earlier `history` turns (question, answer), if any.

        `sources` > 0 also names that many pages or line ranges the answer drew on; 0 skips the cost. An answer
        that the document does not say (`not_stated`) cites none."""
        check_question(question)
        question_ids = conversation_ids(self.tokenizer, history, question)
        engine, second = self.engine.fork(answering), None
        if engine.answering.reread:
            if self.input_ids is None:
                raise SettingError("{reread} needs the document's tokens, which this context was saved without: "
                                   "read the document again")
            second = reread(self.engine, self.tokenizer, self.input_ids, self.source_map, question, question_ids,
                            engine.answering, sources, on_token)
        if second is not None:
            generation, engine, cited, windows = second.generation, second.engine, second.sources, second.windows
            generation.time_to_first_token_s += second.extra_s
        else:
            tally = AttentionTally(len(engine.cache.layers), self.engine.kept_tokens) if sources > 0 else None
            generation = engine.answer(question_ids, on_token=on_token, tally=tally)
            cited = tally.sources(self.engine.cache, engine.cache, self.source_map, sources) if tally else None
            windows = None
        answer_s = generation.time_to_first_token_s + generation.decode_s
        model = engine.model
        memory, memory_device = peak_memory(model.device)
        read_tokens = 0 if self.loaded_from else self.engine.document_tokens
        all_tokens = self.engine.document_tokens + len(question_ids) + len(generation.token_ids)
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
        kept = kept_per_unit(self.engine.cache, self.source_map, self.engine.kept_tokens)
        return self.source_map.labels(), kept.tolist()

