"""Every decision about a run, made once: what was asked for, and what the model brings, become one `Plan`.

    policy = read_policy(read, source)                 # before anything loads: the policy given, or a saved one's
    session = load_session(spec.checked(), reads_with=policy)
    plan = resolve(session.facts, read=..., answer=..., questions=..., saved=header)

- `resolve`: the read settings, the policy among them (those given, else the ones recorded with the model's heads,
  else the defaults, in bounds; stabilizers that do not fit the budget clipped, with a warning; LazyLLM's own cut;
  lazy prefill refused where nothing can guide it; the prompt's head and the stabilizers within the budget; the
  locret policy refused on a model without heads), or a saved context's, which are fixed; a policy's own knob given
  under another policy, with a warning; the answer settings and chat's history the same way; the questions a policy
  reads with (FINCH), and whether the bounded read may wait for the first answer that needs it.
- The plan then says how many entries the cache holds at most (`cache_entries`), which the engine reserves and the
  memory check counts.

`Session`, `Engine` and the routes take a plan's values as they are: nothing below checks or changes them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from locret_cli.errors import SettingError
from locret_cli.files import is_saved_context
from locret_cli.inputs.questions import check_question
from locret_cli.settings import DEFAULT_POLICY, AnswerSettings, ReadSettings, knob_owner, names

if TYPE_CHECKING:
    from locret_cli.inputs.prompt import PromptTokens

HISTORY_TOKENS = 1024  # chat: tokens of earlier turns kept with each question, unless given or recorded
QUESTION_ALLOWANCE = 256  # tokens a question is planned to take when a document is read before it is asked
NEEDS_HEADS = ("the locret policy needs retaining heads for this model: pass {heads} DIR (train them with `locret "
               "train`), or choose {policy} streaming or full")
# whole settings, or those given by name
GivenSettings = ReadSettings | AnswerSettings | Mapping[str, object] | None


@dataclass(frozen=True)
class ModelFacts:
    """What a plan needs to know of the loaded model: the settings recorded with its heads, its decoder layers,
    whether any of them slides (Gemma 3), its prompt's tokens (the head read first and never evicted, where answers
    end), and whether it has retaining heads (the locret policy needs them)."""

    defaults: Mapping[str, object]
    layers: int
    sliding: bool
    prompt: PromptTokens
    has_heads: bool = True


@dataclass(frozen=True)
class Plan:
    """One run's decisions: the final read settings (the policy among them) and answer settings, the prompt's tokens,
    chat's history, the questions the read is steered by (a policy that reads with them; else none), whether the
    bounded read waits for an answer that needs it, the longest known question's tokens, and the warnings to show."""

    read: ReadSettings
    answer: AnswerSettings
    prompt: PromptTokens
    history_tokens: int = HISTORY_TOKENS
    read_for: tuple[str, ...] = ()
    defer: bool = False
    question_tokens: int = 0  # the longest question known when planned, in its chat layout (`question_room.py`)
    warnings: tuple[str | SettingError, ...] = ()  # a SettingError names settings the caller's way (`render`)

    @property
    def question_room(self) -> int:
        """The tokens planned for the longest question: its own where known, and at least QUESTION_ALLOWANCE."""
        return max(QUESTION_ALLOWANCE, self.question_tokens)

    @property
    def evicts(self) -> bool:
        """Whether the read's policy drops entries (all but `full`)."""
        from locret_cli.core.policies import POLICIES

        return POLICIES[self.read.policy].evicts

    def cache_entries(self, document_tokens: int | None = None) -> int | None:
        """The most entries per KV head the cache holds: an evicting policy's budget and chunk, else the whole
        document (`document_tokens`; None: not known), then the longest question (at least QUESTION_ALLOWANCE) and
        the longest answer."""
        after = self.question_room + self.answer.max_new_tokens
        if self.evicts:
            return self.read.budget + self.read.chunk_size + after
        return None if document_tokens is None else document_tokens + after


def read_policy(read: Mapping[str, object], source: str | None = None) -> str:
    """The policy a run reads with, before any model loads: a saved context's at `source` (giving another is
    refused), else the one given in `read`, else the default. (A model's recorded settings may name another: the
    plan then reads with that.)"""
    given = read.get("policy")
    if given is not None:
        ReadSettings(policy=given).checked()
    if source is not None and is_saved_context(source):
        from locret_cli.api.context_header import read_header

        saved = read_header(source)["settings"]["policy"]
        if given is not None and given != saved:
            raise SettingError("{path} was read with {policy} {saved}, not {given}", path=source, saved=saved,
                               given=given)
        return saved
    return given or DEFAULT_POLICY


def resolve(facts: ModelFacts, read: GivenSettings = None, answer: GivenSettings = None, *,
            history_tokens: int | None = None, questions: Sequence[str] | None = (), defer: bool = False,
            saved: tuple[str, Mapping] | None = None) -> Plan:
    """The plan of a run on a model with `facts`. `read` and `answer` are whole settings or those given by name
    (None values: not given); `questions` those of the run, or None where they are not known yet (a plan of settings
    alone, which reads nothing); `saved` is (path, header) of the saved context the read comes from."""
    from locret_cli.core.policies import POLICIES  # torch: `read_policy` runs without it

    warnings: list[str | SettingError] = []
    given_read = _given(read)
    if saved is not None:
        chosen = _fixed(*saved, given_read)
    else:
        chosen = ReadSettings(**_chosen(ReadSettings, facts.defaults, given_read)).checked(warnings.append)
    policy, policy_class = chosen.policy, POLICIES[chosen.policy]
    defaults = ReadSettings()
    for name, value in given_read.items():
        if (owner := knob_owner(name)) not in (None, policy) and value != getattr(defaults, name):
            warnings.append(SettingError("{%s} is a setting of the %s policy; {policy} {policy_value} does not read it"
                                         % (name, owner), policy_value=policy))
    read_for = tuple(questions or ()) if policy_class.reads_for(chosen) and saved is None else ()
    if saved is None:
        if policy == "locret" and not facts.has_heads and questions is not None:  # a plan that reads
            raise SettingError(NEEDS_HEADS)
        chosen = _for_policy(chosen, policy_class, facts, guided=bool(read_for))
    answering = AnswerSettings(**_chosen(AnswerSettings, facts.defaults, _given(answer))).checked()
    history = history_tokens if history_tokens is not None else facts.defaults.get("history_tokens", HISTORY_TOKENS)
    if history < 0:
        raise SettingError("{history_tokens} must be zero or more, got {value}", value=history)
    for question in questions or ():
        check_question(question)
    if policy_class.reads_question and saved is None and questions is not None and not read_for:
        raise SettingError("the {policy} {policy_value} policy reads the document with its questions: ask FILE "
                           "QUESTION, or give {questions}", policy_value=policy)
    deferred = defer and not (read_for and policy_class.reads_question)  # finch reads at once; guided locret may wait
    return Plan(chosen, answering, facts.prompt, history, read_for, deferred, warnings=tuple(warnings))


def _given(settings: GivenSettings) -> dict:
    if settings is None:
        return {}
    given = asdict(settings) if isinstance(settings, (ReadSettings, AnswerSettings)) else settings
    return {name: value for name, value in given.items() if value is not None}


def _chosen(settings_class: type, defaults: Mapping[str, object], given: Mapping[str, object]) -> dict:
    """`settings_class`'s values: those given, else the model's recorded ones (the global defaults fill the rest)."""
    unknown = sorted(set(given) - set(names(settings_class)))
    if unknown:
        raise SettingError("unknown setting(s): {unknown}", unknown=", ".join(unknown))
    return {k: v for k, v in defaults.items() if k in names(settings_class)} | dict(given)


def _fixed(path: str, header: Mapping, given: Mapping[str, object]) -> ReadSettings:
    """A saved context's read settings; giving others is refused."""
    fixed = ReadSettings(**{k: v for k, v in header["settings"].items() if k in names(ReadSettings)})
    for name, value in given.items():
        if value != getattr(fixed, name):
            raise SettingError(f"{{{name}}} is fixed when the document is read: {{path}} was read with {{used}}, "
                               f"not {{value}}", path=path, used=getattr(fixed, name), value=value)
    return fixed


def _for_policy(settings: ReadSettings, policy_class: type, facts: ModelFacts, guided: bool) -> ReadSettings:
    """`settings` as the policy of `policy_class` reads with them on this model (`guided`: by the run's questions):
    LazyLLM prunes from its own cut unless one is given; lazy prefill needs a policy and layers it can go by, and a
    read that is not guided; the prompt's head and the stabilizers must fit."""
    from locret_cli.core.lazy_prefill import check_lazy

    if policy_class.prunes and not settings.lazy_after:
        settings = replace(settings, lazy_after=policy_class.lazy_cut(facts.layers))
    check_lazy(settings, policy_class, facts.layers, facts.sliding, guided)
    if policy_class.evicts and facts.prompt.pinned + settings.stabilizers > settings.budget:
        raise SettingError(
            "the prompt's opening ({pinned} tokens, never evicted) and {stabilizers} {stabilizers_value} do not fit "
            "in {budget} {budget_value}; raise {budget} or lower {stabilizers}",
            pinned=facts.prompt.pinned, stabilizers_value=settings.stabilizers, budget_value=settings.budget)
    return settings
