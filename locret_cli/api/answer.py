"""What reading a document and answering from it produced: `DocumentInfo` and `AskResult`, whose `to_json()` is the
`--json` document."""

from __future__ import annotations

from dataclasses import dataclass, field

from locret_cli.api.reread import Window
from locret_cli.checks.grounding import Grounding
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


@dataclass
class AskResult:
    """An answer, the pages or lines it drew on, and everything it cost. `to_json()` is the `--json` document."""

    question: str
    answer: str
    sources: list[Source] | None  # None when not computed (--no-sources)
    model: str
    policy: str
    route: str  # the route that answered (`api/routes.py`): "windows" or "bounded-cache"
    settings: ReadSettings
    answering: AnswerSettings
    document: DocumentInfo
    holds_document: bool  # whether the bounded read had run (False: the answer came from re-read windows alone)
    cache_kept_tokens: int
    lazy_pruned_tokens: int  # document tokens lazy prefill ran through only the first `lazy_after` layers
    cache_peak_tokens: int
    cache_peak_bytes: int
    full_cache_bytes: int
    memory_peak_bytes: int
    memory_device: str
    read_s: float  # reading the document (or loading its saved context) in this process, until this answer
    loaded_from: str | None  # the .locret file the reading came from, if any
    answer_s: float  # question prefill and decoding
    decode_s: float
    decode_steps: int
    prefill_tokens_per_s: float  # tokens prefilled in this process (document if read, windows, question) per second
    decode_tokens_per_s: float | None
    time_to_first_token_s: float  # from the start of reading (or loading) to the first answer token
    total_s: float  # read_s + answer_s
    warnings: list[str] = field(default_factory=list)
    compute: str = ""  # the dtype and why, and whether linears were packed
    windows: list[Window] | None = None  # the windows read again for this answer (`api/reread.py`), if any
    read_for: tuple[str, ...] = ()  # the questions that steered the read; empty: a question-agnostic read
    grounding: Grounding | None = None  # the answer's content checked against the document's text
    withheld: str | None = None  # the model's answer, when `strict` replaced it with REFUSAL
    restated_from: str | None = None  # the model's own words, when the answer was restated in the question's
    reader: str | None = None  # the reader the answer read the bounded cache with (`core/answer/reader.py`), if any
    cache_by_kind: dict | None = None  # a model with sliding layers: each kind's layers, peak and full-cache bytes

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "answer": self.answer,
            "sources": None if self.sources is None else [s.to_json() for s in self.sources],
            "model": self.model,
            "document": self.document.to_json(),
            "context": {"loaded_from": self.loaded_from},
            **settings_json(self.settings, self.answering),
            "policy": self.policy,
            "read_for": list(self.read_for),
            "route": self.route,
            "reader": self.reader,
            "grounding": None if self.grounding is None else {**self.grounding.to_json(), "withheld": self.withheld,
                                                              "restated_from": self.restated_from},
            "kv_cache": {
                "holds_document": self.holds_document,
                "kept_tokens": self.cache_kept_tokens,
                "lazy_pruned_tokens": self.lazy_pruned_tokens,
                "peak_tokens": self.cache_peak_tokens,
                "peak_bytes": self.cache_peak_bytes,
                "full_cache_bytes": self.full_cache_bytes,
                "by_kind": self.cache_by_kind,
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
            "windows": None if self.windows is None else [w.to_json() for w in self.windows],
            "warnings": self.warnings,
        }
