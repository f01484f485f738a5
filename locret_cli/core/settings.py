"""The settings of a read and of an answer, apart: a document's cache is shaped by `ReadSettings`, fixed once it is
read (and saved with a `.locret` file); each answer from it may use other `AnswerSettings`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from locret_cli.core.kv_quant import KV_BITS
from locret_cli.errors import SettingError

POSITION_MODES = ("compact", "original")
LOCATE_MODES = ("attention", "words", "both")  # what names the windows `--reread` reads again
POLICY_NAMES = ("locret", "streaming", "h2o", "snapkv", "lazyllm", "finch", "random", "knorm", "full")  # `policies.make_policy` builds each


@dataclass(frozen=True)
class ReadSettings:
    """How a document streams through the model into the bounded cache."""

    budget: int = 6000
    chunk_size: int = 3072
    stabilizers: int = 2500
    positions: str = "compact"
    score_pool: int = 1  # locret: max-pool scores over this many neighbouring tokens (`LocretPolicy`)
    span: int = 1  # entries kept or dropped in blocks of this many document tokens (`policies.select`); 1: singly
    kv_bits: int = 16  # keys and values held as the model makes them (16), or quantized per entry to 8 or 4 bits
    lazy_after: int = 0  # lazy prefill (`lazy_prefill.py`): tokens this many layers would drop skip the rest; 0: off
    lazy_share: float = 1.0  # lazy prefill prunes at most this share of a chunk's tokens

    def checked(self, warn: Callable[[str], None] = lambda _: None) -> "ReadSettings":
        """These settings made valid: bad values raise SettingError; stabilizers >= budget are clipped to
        budget // 2, with a warning."""
        for name in ("budget", "chunk_size"):
            if getattr(self, name) <= 0:
                raise SettingError(f"{{{name}}} must be positive, got {{value}}", value=getattr(self, name))
        if self.stabilizers < 0:
            raise SettingError("{stabilizers} must be zero or more, got {value}", value=self.stabilizers)
        if self.span < 1:
            raise SettingError("{span} must be positive, got {value}", value=self.span)
        if self.score_pool < 1 or self.score_pool % 2 == 0:
            raise SettingError("{score_pool} must be a positive odd number, got {value}", value=self.score_pool)
        if self.lazy_after < 0 or not 0 < self.lazy_share <= 1:
            raise SettingError("{lazy_after} must be zero or more and {lazy_share} in (0, 1]")
        if self.kv_bits not in KV_BITS:
            raise SettingError("{kv_bits} must be 16, 8 or 4, got {value}", value=self.kv_bits)
        if self.positions not in POSITION_MODES:
            raise SettingError("{positions} must be compact or original, got {value!r}", value=self.positions)
        if self.stabilizers >= self.budget:
            clipped = self.budget // 2
            warn(SettingError("{stabilizers} {given} does not fit in {budget} {budget_value}; using {clipped}",
                              given=self.stabilizers, budget_value=self.budget, clipped=clipped))
            return replace(self, stabilizers=clipped)
        return self


@dataclass(frozen=True)
class AnswerSettings:
    """How one answer is decoded from a read document."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop_repeats: int = 0  # stop an answer that repeats a run of this many tokens or more right after itself; 0: off
    reread: int = 0  # answer from this many windows of the document read again whole (`api/reread.py`); 0: off
    reread_tokens: int = 1024  # tokens per re-read window
    locate: str = "attention"  # what names the windows: the first answer's attention, the question's words, or both
    strict: bool = False  # replace an answer whose content is not in the document with "The document does not say."

    def checked(self) -> "AnswerSettings":
        """These settings, or SettingError for a bad value."""
        if self.max_new_tokens <= 0:
            raise SettingError("{max_new_tokens} must be positive, got {value}", value=self.max_new_tokens)
        if self.reread < 0 or self.reread_tokens < 1:
            raise SettingError("{reread} must be zero or more and {reread_tokens} positive")
        if self.locate not in LOCATE_MODES:
            raise SettingError("{locate} must be attention, words or both, got {value!r}", value=self.locate)
        if self.stop_repeats < 0:
            raise SettingError("{stop_repeats} must be zero or more, got {value}", value=self.stop_repeats)
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise SettingError("{temperature} must be >= 0 and {top_p} in (0, 1]")
        return self


def names(kind: type) -> tuple[str, ...]:
    """The setting names of `kind` (ReadSettings or AnswerSettings)."""
    return tuple(f.name for f in fields(kind))


def split_given(given: Mapping[str, object]) -> tuple[dict, dict]:
    """`given` settings (None values left out) as (read ones, answer ones); an unknown name raises SettingError."""
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(names(ReadSettings)) - set(names(AnswerSettings)))
    if unknown:
        raise SettingError("unknown setting(s): {unknown}", unknown=", ".join(unknown))
    read = {k: v for k, v in given.items() if k in names(ReadSettings)}
    return read, {k: v for k, v in given.items() if k not in read}
