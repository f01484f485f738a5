"""Every decision about a run, made once: what was asked for, and what the model brings, become one `Plan`.

    spec = checked_spec(spec, source)                  # before anything loads
    session = load_session(spec)
    plan = resolve(spec, session.facts, read=..., answer=..., questions=..., saved=header)

- `checked_spec`: the policy (the one named, else a saved context's, else the default) and which model options
  combine (`ModelSpec.checked`).
- `resolve`: the read settings (those given, else the ones recorded with the model's heads, else the defaults, in
  bounds; stabilizers that do not fit the budget clipped, with a warning; LazyLLM's own cut; lazy prefill refused
  where nothing can guide it; the prompt's head and the stabilizers within the budget), or a saved context's, which
  are fixed; a policy's own knob given under another policy, with a warning; the answer settings and chat's history
  the same way; the questions a policy reads with (FINCH), and whether the bounded read may wait for the first
  answer that needs it.

`Session`, `Engine` and the routes take a plan's values as they are: nothing below checks or changes them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

from locret_cli.errors import SettingError
from locret_cli.files import is_saved_context
from locret_cli.inputs.questions import check_question
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import AnswerSettings, ReadSettings, knob_owner, names, settings_json

HISTORY_TOKENS = 1024  # chat: tokens of earlier turns kept with each question, unless given or recorded
Given = ReadSettings | AnswerSettings | Mapping[str, object] | None  # whole settings, or those given by name


@dataclass(frozen=True)
class ModelFacts:
    """What a plan needs to know of the loaded model: the settings recorded with its heads, its decoder layers,
    whether any of them slides (Gemma 3), and the tokens of the prompt's head (read first, never evicted)."""

    defaults: Mapping[str, object]
    layers: int
    sliding: bool
    pinned: int


@dataclass(frozen=True)
class Plan:
    """One run's decisions: the policy, the final read and answer settings, chat's history, the questions the read is
    steered by (a policy that reads with them; else none), whether the bounded read waits for an answer that needs
    it, the saved context the read comes from (its settings are the file's), the longest known question's tokens,
    and the warnings to show."""

    policy: str
    read: ReadSettings
    answer: AnswerSettings
    history_tokens: int = HISTORY_TOKENS
    read_for: tuple[str, ...] = ()
    defer: bool = False
    saved: str | None = None
    question_tokens: int = 0  # the longest question known when planned, in its chat layout (`question_room.py`)
    warnings: tuple[str | SettingError, ...] = ()  # a SettingError names settings the caller's way (`render`)

    def settings_json(self) -> dict:
        """Every setting by name, as `--json` prints them."""
        return settings_json(self.read, self.answer)


def checked_spec(spec: ModelSpec, source: str | None = None) -> ModelSpec:
    """`spec` with its policy named (the saved context's at `source`, if it is one, else the default:
    `ModelSpec.checked`) and its options checked; a policy other than a saved context's is refused."""
    if source is not None and is_saved_context(source):
        from locret_cli.api.saved_context import read_header

        saved = read_header(source)["policy"]
        if spec.policy and spec.policy != saved:
            raise SettingError("{path} was read with {policy} {saved}, not {given}", path=source, saved=saved,
                               given=spec.policy)
        spec = replace(spec, policy=saved)
    return spec.checked()


def resolve(policy: str, facts: ModelFacts, read: Given = None, answer: Given = None, *,
            history_tokens: int | None = None, questions: Sequence[str] | None = (), defer: bool = False,
            saved: tuple[str, Mapping] | None = None) -> Plan:
    """The plan of a run under `policy` on a model with `facts`. `read` and `answer` are whole settings or those given
    by name (None values: not given); `questions` those of the run, or None where they are not known yet (a plan of
    settings alone, which reads nothing); `saved` is (path, header) of the saved context the read comes from."""
    from locret_cli.core.policies import POLICIES  # torch: `checked_spec` runs without it

    warnings: list[str | SettingError] = []
    kind = POLICIES[policy]
    given_read = _given(read)
    defaults = ReadSettings()
    for name, value in given_read.items():
        if (owner := knob_owner(name)) not in (None, policy) and value != getattr(defaults, name):
            warnings.append(SettingError("{%s} is a setting of the %s policy; {policy} {policy_value} does not read it"
                                         % (name, owner), policy_value=policy))
    if saved is not None:
        chosen = _fixed(*saved, given_read)
    else:
        chosen = ReadSettings(**_chosen(ReadSettings, facts.defaults, given_read)).checked(warnings.append)
        chosen = _for_policy(chosen, kind, facts)
    answering = AnswerSettings(**_chosen(AnswerSettings, facts.defaults, _given(answer))).checked()
    history = history_tokens if history_tokens is not None else facts.defaults.get("history_tokens", HISTORY_TOKENS)
    if history < 0:
        raise SettingError("{history_tokens} must be zero or more, got {value}", value=history)
    for question in questions or ():
        check_question(question)
    read_for = tuple(questions or ()) if kind.reads_question and saved is None else ()
    if kind.reads_question and saved is None and questions is not None and not read_for:
        raise SettingError("the {policy} {policy_value} policy reads the document with its questions: ask FILE "
                           "QUESTION, or give {questions}", policy_value=policy)
    return Plan(policy, chosen, answering, history, read_for, defer and not read_for,
                saved[0] if saved else None, warnings=tuple(warnings))


def _given(settings: Given) -> dict:
    if settings is None:
        return {}
    given = asdict(settings) if isinstance(settings, (ReadSettings, AnswerSettings)) else settings
    return {name: value for name, value in given.items() if value is not None}


def _chosen(kind: type, defaults: Mapping[str, object], given: Mapping[str, object]) -> dict:
    """`kind`'s values: those given, else the model's recorded ones (the global defaults fill the rest)."""
    unknown = sorted(set(given) - set(names(kind)))
    if unknown:
        raise SettingError("unknown setting(s): {unknown}", unknown=", ".join(unknown))
    return {k: v for k, v in defaults.items() if k in names(kind)} | dict(given)


def _fixed(path: str, header: Mapping, given: Mapping[str, object]) -> ReadSettings:
    """A saved context's read settings; giving others is refused."""
    fixed = ReadSettings(**{k: v for k, v in header["settings"].items() if k in names(ReadSettings)})
    for name, value in given.items():
        if value != getattr(fixed, name):
            raise SettingError(f"{{{name}}} is fixed when the document is read: {{path}} was read with {{used}}, "
                               f"not {{value}}", path=path, used=getattr(fixed, name), value=value)
    return fixed


def _for_policy(settings: ReadSettings, kind: type, facts: ModelFacts) -> ReadSettings:
    """`settings` as `kind` of policy reads with them on this model: LazyLLM prunes from its own cut unless one is
    given; lazy prefill needs a policy and layers it can go by; the prompt's head and the stabilizers must fit."""
    from locret_cli.core.lazy_prefill import check_lazy

    if kind.prunes and not settings.lazy_after:
        settings = replace(settings, lazy_after=kind.lazy_cut(facts.layers))
    check_lazy(settings, kind, facts.layers, facts.sliding)
    if kind.evicts and facts.pinned + settings.stabilizers > settings.budget:
        raise SettingError(
            "the prompt's opening ({pinned} tokens, never evicted) and {stabilizers} {stabilizers_value} do not fit "
            "in {budget} {budget_value}; raise {budget} or lower {stabilizers}",
            pinned=facts.pinned, stabilizers_value=settings.stabilizers, budget_value=settings.budget)
    return settings
