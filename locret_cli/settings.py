"""The settings of a read and of an answer, apart, each declared once: name, type, default, help and bounds.

A document's cache is shaped by `ReadSettings`, fixed once it is read (and saved with a `.locret` file); each answer
from it may use other `AnswerSettings`. Each field's `setting(...)` metadata is the one declaration that the checks
here, the command line's options (`cli/option_groups.py`), `--json`, batch rows and the docs table read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields, replace

from locret_cli.errors import SettingError

DEFAULT_POLICY = "locret"  # the eviction policy unless one is asked for (`core/policies`: every policy by name)
# every policy's name, in the order shown: here, without importing torch, so that the command line's help and its
# errors come at once; `core/policies` registers one class under each (tests/test_policies.py)
POLICY_NAMES = ("locret", "streaming", "h2o", "snapkv", "lazyllm", "finch", "random", "knorm", "full")
KV_BITS = (16, 8, 4)  # bits per cached key and value (`core/cache/quantized.py`)
POSITION_MODES = ("compact", "original")
LOCATE_MODES = ("attention", "words", "both", "bm25")  # what names the windows `--reread` reads again
TEXT_LOCATES = ("words", "bm25")  # those that need only the document's text, not the bounded read
UNFOUND_SCOPES = ("document", "read")  # where `--refuse-unfound` looks for an answer's content
FALLBACKS = ("unlocated", "unspecific", "unstated")  # when the bounded cache answers in place of `--reread`'s windows
SEED_MAX = 2**64 - 1  # the largest seed a torch.Generator takes


def setting(default, help: str, *, minimum: float | None = None, odd: bool = False, choices: tuple = (),
            above: float | None = None, at_most: float | None = None, flag: str | None = None,
            policy: str | None = None) -> Field:
    """A settings field: its default, its help, and its bounds (`minimum` and `at_most` inclusive; `above`
    exclusive, with `at_most` an interval such as (0, 1]; `odd`; `choices`). `flag` overrides the option's name(s).
    `policy` names the one policy that reads it: a knob of that policy (declared among its `knobs`), which no other
    policy sees."""
    return field(default=default, metadata=dict(help=help, minimum=minimum, odd=odd, choices=choices, above=above,
                                                at_most=at_most, flag=flag, policy=policy))


def bound_error(spec: Field, value) -> str | None:
    """Why `value` breaks `spec`'s bounds, as "must be ...", or None when it is within them."""
    meta = spec.metadata
    if meta["odd"] and (value < 1 or value % 2 == 0):
        return "must be a positive odd number"
    if meta["minimum"] is not None and value < meta["minimum"]:
        return "must be positive" if meta["minimum"] == 1 else "must be zero or more"
    if meta["above"] is not None and not meta["above"] < value <= meta["at_most"]:
        return f"must be in ({meta['above']:g}, {meta['at_most']:g}]"
    if meta["at_most"] is not None and value > meta["at_most"]:
        return f"must be at most {shown_value(meta['at_most'])}"
    if meta["choices"] and value not in meta["choices"]:
        *rest, last = [str(choice) for choice in meta["choices"]]
        return f"must be {', '.join(rest)} or {last}"
    return None


def shown_value(value) -> str:
    """A setting's value as help, docs and errors show it: on/off for a flag, 1 for 1.0, 6000 for 6000."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def check_bounds(settings) -> None:
    """Raise SettingError naming the first field of `settings` (a settings dataclass) out of its bounds."""
    for spec in fields(settings):
        value = getattr(settings, spec.name)
        if (why := bound_error(spec, value)) is not None:
            raise SettingError(f"{{{spec.name}}} {why}, got {{value}}",
                               value=repr(value) if isinstance(value, str) else shown_value(value))


@dataclass(frozen=True)
class ReadSettings:
    """How a document streams through the model into the bounded cache."""

    policy: str = setting(DEFAULT_POLICY, "Eviction policy: which entries the bounded cache keeps (full: every one).",
                          choices=POLICY_NAMES)
    budget: int = setting(6000, "Cache entries kept per KV head.", minimum=1)
    chunk_size: int = setting(3072, "Tokens prefilled per step.", minimum=1)
    stabilizers: int = setting(2500, "Most recent entries always kept; clipped to budget/2 if it does not fit.",
                               minimum=0)
    positions: str = setting("compact", "compact: renumber kept entries 0..n-1; original: keep true positions.",
                             choices=POSITION_MODES)
    score_pool: int = setting(1, "locret: each score becomes the best within this many neighbouring tokens (odd), "
                                 "so a highly rated entry keeps its neighbours.", odd=True, policy="locret")
    question_share: float = setting(0.0, "locret: where the read knows its questions (ask), this share of the budget "
                                         "is kept by the attention the question pays the document after every "
                                         "chunk, the rest by the heads; 0: the read ignores the question, so a "
                                         "read serves any question.", minimum=0, at_most=1, policy="locret")
    span: int = setting(1, "Keep or drop entries in blocks of this many document tokens, each ranked by its best "
                           "score, so that what is kept reads as text; 1: each entry on its own.", minimum=1)
    kv_bits: int = setting(16, "Bits per cached key and value: 16 (as the model makes them), 8 or 4 (quantized per "
                               "entry and head, with its own scale; scores and positions stay exact).",
                           choices=KV_BITS)
    lazy_after: int = setting(0, "Lazy prefill: a chunk's tokens that the first N layers' eviction would drop skip "
                                 "the layers above them, so reading costs fewer FLOPs; 0: off.", minimum=0)
    lazy_share: float = setting(1.0, "Lazy prefill prunes at most this share of a chunk's tokens, the best-scored "
                                     "of the rest still flowing.", above=0, at_most=1)

    def checked(self, warn: Callable[[str], None] = lambda _: None) -> "ReadSettings":
        """These settings made valid: a value out of bounds raises SettingError; stabilizers >= budget are clipped
        to budget // 2, with a warning."""
        check_bounds(self)
        if self.stabilizers >= self.budget:
            clipped = self.budget // 2
            warn(SettingError("{stabilizers} {given} does not fit in {budget} {budget_value}; using {clipped}",
                              given=self.stabilizers, budget_value=self.budget, clipped=clipped))
            return replace(self, stabilizers=clipped)
        return self


@dataclass(frozen=True)
class AnswerSettings:
    """How one answer is decoded from a read document."""

    max_new_tokens: int = setting(256, "Longest answer, in tokens.", minimum=1)
    temperature: float = setting(0.0, "Sampling temperature; 0 decodes greedily.", minimum=0)
    top_p: float = setting(1.0, "Nucleus sampling mass when the temperature is above 0.", above=0, at_most=1)
    seed: int = setting(0, "Seed for sampling.", minimum=0, at_most=SEED_MAX)
    stop_repeats: int = setting(0, "Stop an answer that repeats a run of this many tokens or more right after "
                                   "itself, dropping the repeat; 0: off.", minimum=0)
    word_repeats: bool = setting(True, "Let an answer give the same word twice in a row; off: where the likeliest "
                                       "next token repeats the word just given (\"the pass pass\"), the next likeliest "
                                       "is taken. Numbers, punctuation and pieces of words may always repeat.",
                                 flag="--word-repeats/--no-word-repeats")
    numbers_from_document: bool = setting(False, "Give only numbers the document holds: where the likeliest next "
                                                 "digit would make a number that no number of the document begins "
                                                 "with, the next likeliest token is taken. Off: any number, as an "
                                                 "answer that computes one needs.",
                                          flag="--numbers-from-document/--any-numbers")
    reread: int = setting(0, "Answer from this many windows of the document read again whole, where --locate "
                             "places them; 0: off (the bounded cache answers).", minimum=0)
    reread_tokens: int = setting(1024, "Tokens per re-read window.", minimum=1)
    locate: str = setting("attention", "What places the re-read windows: attention (where a first answer from the "
                                       "bounded cache looked), words (where the question's rarer words occur), "
                                       "both, or bm25 (centred on the passages whose words best match the "
                                       "question's, by BM25).", choices=LOCATE_MODES)
    fallback: str = setting("unlocated", "With --reread, when the bounded cache answers instead: unlocated (no window "
                                         "is located); unspecific (also when the windows' answer names nothing the "
                                         "document holds, and the bounded cache's answer does); or unstated (also "
                                         "when the document does not state the windows' answer in a sentence naming "
                                         "all that the question names, and states the bounded cache's).",
                            choices=FALLBACKS)
    hops: int = setting(1, "With --reread: 2 also reads again the windows where the first answer's own rarer words "
                           "occur, and answers from all of them (a fact that needs two places); 1: one pass.",
                        minimum=1, at_most=2)
    strict: bool = setting(False, "Replace an answer whose specific content (numbers, names, codes, phrases) is not "
                                  "in the document with \"The document does not say.\", and exit with status 4.",
                           flag="--strict/--no-strict")
    refuse_unfound: bool = setting(False, "Replace an answer whose specific content (a number, name, code or phrase) "
                                          "occurs nowhere in the document, made up, with \"The document does not "
                                          "say.\", and exit with status 4; --strict also withholds content the "
                                          "document gives elsewhere.", flag="--refuse-unfound/--keep-unfound")
    say_unstated: bool = setting(False, "Ask the model, after the question, to reply \"The document does not say.\" "
                                        "where the text it reads does not answer the question.",
                                 flag="--say-unstated/--no-say-unstated")
    unfound_in: str = setting("document", "Where --refuse-unfound looks for an answer's specific content: document "
                                          "(anywhere in it), or read (in the windows an answer from --reread read "
                                          "again, or the question; an answer from the bounded cache is looked for in "
                                          "the document).",
                              choices=UNFOUND_SCOPES)
    answerable_below: float = setting(0.0, "With --reread: before answering, ask the model whether the windows it "
                                           "read answer the question (yes or no), and reply \"The document does not "
                                           "say.\" (exit status 4) where its share of yes is below this; 0: off.",
                                      minimum=0, at_most=1)

    @property
    def may_withhold(self) -> bool:
        """Whether an answer may be replaced by the refusal after it is decoded (so it is shown only once checked)."""
        return self.strict or self.refuse_unfound or self.answerable_below > 0

    def checked(self) -> "AnswerSettings":
        """These settings, or SettingError for a value out of bounds."""
        check_bounds(self)
        return self


def policy_knobs(settings: ReadSettings) -> dict[str, object]:
    """The read settings that belong to one policy each (`setting(policy=...)`), by name: what `make_policy` hands to
    the policy that declares them."""
    return {spec.name: getattr(settings, spec.name) for spec in fields(settings) if spec.metadata["policy"]}


def knob_owner(name: str) -> str | None:
    """The policy a read setting belongs to, or None for a setting every read shares."""
    return next((spec.metadata["policy"] for spec in fields(ReadSettings) if spec.name == name), None)


def names(kind: type) -> tuple[str, ...]:
    """The setting names of `kind` (ReadSettings or AnswerSettings)."""
    return tuple(f.name for f in fields(kind))


def settings_json(read: ReadSettings, answering: AnswerSettings | None = None) -> dict:
    """Every setting by name, read ones first: the shape `--json`, `read --json` and batch rows share."""
    chosen = [read] + ([answering] if answering is not None else [])
    return {spec.name: getattr(kind, spec.name) for kind in chosen for spec in fields(kind)}


def split_given(given: Mapping[str, object]) -> tuple[dict, dict]:
    """`given` settings (None values left out) as (read ones, answer ones); an unknown name raises SettingError."""
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(names(ReadSettings)) - set(names(AnswerSettings)))
    if unknown:
        raise SettingError("unknown setting(s): {unknown}", unknown=", ".join(unknown))
    read = {k: v for k, v in given.items() if k in names(ReadSettings)}
    return read, {k: v for k, v in given.items() if k not in read}
