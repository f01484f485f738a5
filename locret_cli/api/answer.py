"""What reading a document and answering from it produced: `DocumentInfo` and `AskResult`, whose `to_json()` is the
`--json` document. Each nested part of that document is a part of `AskResult` with its own `to_json()`."""

from __future__ import annotations

from dataclasses import dataclass

from locret_cli.checks.grounding import Grounding
from locret_cli.core.answer.reread import Window
from locret_cli.inputs.sources import Source
from locret_cli.settings import AnswerSettings, ReadSettings, settings_json


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
    read_s: float  # tokenizing it, and its bounded read once that ran

    def extent(self) -> tuple[str, int | None]:
        """What progress counts for this document and how many: ("pages", pages) or ("bytes", size)."""
        return ("pages", self.pages) if self.kind == "pdf" else ("bytes", self.size_bytes)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "tokens": self.tokens, "pages": self.pages,
                "sha256": self.sha256, "size_bytes": self.size_bytes, "read_s": self.read_s}


@dataclass(frozen=True)
class ContextOrigin:
    """Where the reading came from: the `.locret` file it was loaded from, or None when it was read here."""

    loaded_from: str | None

    def to_json(self) -> dict:
        return {"loaded_from": self.loaded_from}


@dataclass(frozen=True)
class AnswerGrounding:
    """The answer checked against the document's text (`api/answer_checks.py`): the verdict (None when the
    document's tokens were not at hand), the model's answer if strict mode withheld it, the model's own words
    if the answer was restated in the question's, and its share of yes when asked whether the windows it read answer
    the question (`answerable_below`; None: not asked)."""

    verdict: Grounding | None
    withheld: str | None  # the model's answer, when `strict` replaced it with REFUSAL
    restated_from: str | None
    answerable: float | None = None

    def to_json(self) -> dict | None:
        """The verdict and what strict mode and restating did with it; None when there was no verdict."""
        if self.verdict is None:
            return None
        return {**self.verdict.to_json(), "withheld": self.withheld, "restated_from": self.restated_from,
                "answerable": self.answerable}


@dataclass(frozen=True)
class CacheUse:
    """What the KV cache held for this answer: entries per KV head kept and at their peak, bytes at the peak, and
    what a full cache of every token would need."""

    holds_document: bool  # whether the bounded read had run (False: the answer came from re-read windows alone)
    kept_tokens: int
    lazy_pruned_tokens: int  # document tokens lazy prefill ran through only the first `lazy_after` layers
    peak_tokens: int
    peak_bytes: int
    full_cache_bytes: int
    by_kind: dict | None  # a model with sliding layers: each kind's layers, peak and full-cache bytes

    def to_json(self) -> dict:
        return {"holds_document": self.holds_document, "kept_tokens": self.kept_tokens,
                "lazy_pruned_tokens": self.lazy_pruned_tokens, "peak_tokens": self.peak_tokens,
                "peak_bytes": self.peak_bytes, "full_cache_bytes": self.full_cache_bytes, "by_kind": self.by_kind}


@dataclass(frozen=True)
class MemoryUse:
    """The process's peak memory, and on what it was measured (`core/measure.peak_memory`)."""

    peak_bytes: int
    device: str

    def to_json(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "device": self.device}


@dataclass(frozen=True)
class Speed:
    """How long reading and answering took, and how fast tokens went through."""

    read_s: float  # reading the document (or loading its saved context) in this process, until this answer
    answer_s: float  # question prefill and decoding
    decode_s: float
    decode_steps: int
    prefill_tokens_per_s: float  # tokens prefilled in this process (document if read, windows, question) per second
    decode_tokens_per_s: float | None
    time_to_first_token_s: float  # from the start of reading (or loading) to the first answer token
    total_s: float  # read_s + answer_s
    compute: str  # the dtype and why, and whether linears were packed

    def to_json(self) -> dict:
        return {"read_s": self.read_s, "answer_s": self.answer_s, "prefill_tokens_per_s": self.prefill_tokens_per_s,
                "decode_tokens_per_s": self.decode_tokens_per_s, "time_to_first_token_s": self.time_to_first_token_s,
                "total_s": self.total_s, "compute": self.compute}


@dataclass
class AskResult:
    """An answer, the pages or lines it drew on, and everything it cost, shaped as its `to_json()`, the `--json`
    document."""

    question: str
    answer: str
    sources: list[Source] | None  # None when not computed (--no-sources)
    model: str
    document: DocumentInfo
    context: ContextOrigin
    settings: ReadSettings
    answering: AnswerSettings
    policy: str
    read_for: tuple[str, ...]  # the questions that steered the read; empty: a question-agnostic read
    route: str  # the route that answered (`api/routes.py`): "windows" or "bounded-cache"
    reader: str | None  # the reader the answer read the bounded cache with (`core/answer/reader.py`), if any
    grounding: AnswerGrounding
    kv_cache: CacheUse
    memory: MemoryUse
    speed: Speed
    windows: list[Window] | None  # the windows read again for this answer (`core/answer/reread.py`), if any
    warnings: list[str]

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "sources": None if self.sources is None else [s.to_json() for s in self.sources],
            "model": self.model,
            "document": self.document.to_json(),
            "context": self.context.to_json(),
            **settings_json(self.settings, self.answering),
            "policy": self.policy,
            "read_for": list(self.read_for),
            "route": self.route,
            "reader": self.reader,
            "grounding": self.grounding.to_json(),
            "kv_cache": self.kv_cache.to_json(),
            "memory": self.memory.to_json(),
            "speed": self.speed.to_json(),
            "windows": None if self.windows is None else [w.to_json() for w in self.windows],
            "warnings": self.warnings,
        }
