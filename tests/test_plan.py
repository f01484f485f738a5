"""A run's plan (`api/plan.py`): every rule about a run's policy and settings is decided in `resolve` (and, before
a model loads, the policy in `read_policy`), once, and what reads the document takes the plan as it is."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace

import pytest
from helpers.byte_tokenizers import byte_tokenizer
from helpers.documents import DOCUMENT
from helpers.models import tiny_model
from typer.testing import CliRunner

from locret_cli.api import ModelSpec, Session, load_session
from locret_cli.api.plan import HISTORY_TOKENS, QUESTION_ALLOWANCE, ModelFacts, read_policy, resolve
from locret_cli.api.saved_context import save_reading
from locret_cli.cli import app
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies import POLICIES, make_policy
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.models.loading import LoadedModel
from locret_cli.settings import DEFAULT_POLICY, ReadSettings, policy_knobs

FACTS = ModelFacts({"budget": 300, "stabilizers": 64, "max_new_tokens": 40, "history_tokens": 0}, layers=8,
                   sliding=False, prompt=PromptTokens(pinned=5))


def planned(policy: str, facts: ModelFacts = FACTS, read=None, answer=None, **options):
    """`resolve` of a run under `policy`, the read settings given whole or by name."""
    read = replace(read, policy=policy) if isinstance(read, ReadSettings) else {**(read or {}), "policy": policy}
    return resolve(facts, read, answer, **options)


def test_given_settings_come_first_then_the_recorded_ones_then_the_defaults():
    plan = planned("locret", FACTS, {"chunk_size": 64, "budget": None}, {"temperature": 0.5})
    assert (plan.read.budget, plan.read.chunk_size, plan.read.span) == (300, 64, ReadSettings().span)
    assert (plan.answer.max_new_tokens, plan.answer.temperature) == (40, 0.5)
    assert plan.history_tokens == 0 and planned("locret", ModelFacts({}, 8, False, PromptTokens(pinned=5))).history_tokens == HISTORY_TOKENS
    assert planned("locret", FACTS, ReadSettings(budget=90, stabilizers=20)).read == ReadSettings(budget=90,
                                                                                                 stabilizers=20)
    assert planned("full", FACTS).read.policy == "full" and resolve(FACTS).read.policy == DEFAULT_POLICY


def test_stabilizers_that_do_not_fit_are_clipped_once_with_a_warning():
    plan = planned("locret", FACTS, {"stabilizers": 400})
    assert plan.read.stabilizers == 150
    assert [str(warning) for warning in plan.warnings] == ["stabilizers 400 does not fit in budget 300; using 150"]


@pytest.mark.parametrize("policy, read, message", [
    ("locret", {"budget": 0}, "budget must be positive, got 0"),
    ("locret", {"nonsense": 1}, "unknown setting(s): nonsense"),
    ("streaming", {"budget": 12, "stabilizers": 8}, "the prompt's opening (5 tokens, never evicted)"),
    ("full", {"lazy_after": 2}, "policy full has none to prune by"),
    ("h2o", {"lazy_after": 8}, "lazy_after must be below the model's 8 layers, got 8"),
])
def test_a_run_that_cannot_be_read_is_refused_by_its_plan(policy, read, message):
    with pytest.raises(SettingError) as refused:
        planned(policy, FACTS, read)
    assert message in str(refused.value)


def test_policies_bring_their_own_rules():
    assert planned("lazyllm", FACTS).read.lazy_after == 2  # LazyLLM prunes from a quarter of the way up
    assert planned("lazyllm", FACTS, {"lazy_after": 5}).read.lazy_after == 5
    assert planned("full", FACTS, {"budget": 6, "stabilizers": 4}).read.budget == 6  # nothing evicted: it fits
    with pytest.raises(SettingError, match="sliding layers must see every token"):
        planned("h2o", ModelFacts({}, 8, True, PromptTokens()), {"lazy_after": 2})


def test_a_policys_own_knob_goes_to_that_policy_alone():
    assert [str(w) for w in planned("snapkv", FACTS, {"score_pool": 3}).warnings] == [
        "score_pool is a setting of the locret policy; policy snapkv does not read it"]
    assert planned("locret", FACTS, {"score_pool": 3}).warnings == ()
    assert planned("snapkv", FACTS, ReadSettings(budget=90, stabilizers=20)).warnings == ()  # whole: its default
    owned = {spec.name: spec.metadata["policy"] for spec in fields(ReadSettings) if spec.metadata["policy"]}
    assert owned == {"score_pool": "locret", "question_share": "locret"}
    assert all(name in POLICIES[owner].knobs for name, owner in owned.items())  # declared by the policy it names
    model = tiny_model("llama")
    assert make_policy("locret", model, RetainingHeads(ModelShape.from_config(model.config)),
                       **policy_knobs(ReadSettings(score_pool=5))).score_pool == 5
    assert not hasattr(make_policy("snapkv", model, None, **policy_knobs(ReadSettings(score_pool=5))), "score_pool")


def test_questions_are_checked_and_steer_only_a_policy_that_reads_with_them():
    assert planned("finch", FACTS, questions=["Who?"], defer=True) == planned("finch", FACTS, questions=["Who?"])
    assert planned("finch", FACTS, questions=["Who?"]).read_for == ("Who?",)  # never deferred
    locret = planned("locret", FACTS, questions=["Who?"], defer=True)
    assert locret.read_for == () and locret.defer
    assert planned("finch", FACTS, questions=None).read_for == ()  # settings alone: nothing is read
    with pytest.raises(SettingError, match="reads the document with its questions"):
        planned("finch", FACTS, questions=())
    with pytest.raises(LocretError, match="empty"):
        planned("locret", FACTS, questions=["  "])


def test_a_saved_context_keeps_the_settings_it_was_read_with():
    header = {"settings": {**asdict(ReadSettings(budget=128)), "from_an_older_locret": 1}}
    plan = planned("locret", FACTS, {"budget": 128}, {"max_new_tokens": 9}, saved=("book.locret", header))
    assert plan.read == ReadSettings(budget=128) and plan.answer.max_new_tokens == 9
    with pytest.raises(SettingError) as refused:
        planned("locret", FACTS, {"budget": 64}, saved=("book.locret", header))
    assert "budget is fixed when the document is read: book.locret was read with 128, not 64" in str(refused.value)


def test_the_policy_is_a_read_setting_named_before_the_model_loads(tmp_path):
    assert read_policy({}) == DEFAULT_POLICY and read_policy({"policy": "h2o"}) == "h2o"
    with pytest.raises(SettingError, match="policy must be locret, streaming, .* or full, got 'nope'"):
        read_policy({"policy": "nope"})
    session = load_session(device="cpu")
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    saved = str(tmp_path / "doc.locret")
    save_reading(session.read(str(path), {"policy": "streaming", "budget": 256, "stabilizers": 64}), saved,
                 session.heads)
    assert read_policy({}, saved) == "streaming" and session.open(saved).settings.policy == "streaming"
    with pytest.raises(SettingError, match="was read with policy streaming, not locret"):
        read_policy({"policy": "locret"}, saved)


def test_the_locret_policy_is_refused_on_a_model_without_heads():
    headless = replace(FACTS, has_heads=False)
    assert planned("streaming", headless).read.policy == "streaming"
    with pytest.raises(SettingError, match="the locret policy needs retaining heads for this model"):
        planned("locret", headless)


@pytest.mark.parametrize("spec, message", [
    (ModelSpec("some/model", arch="smollm2-135m"), "choose model or arch"),
    (ModelSpec("some/model", load_4bit=True, load_8bit=True), "choose one of load_4bit, load_8bit and load_int4"),
    (ModelSpec("some/model", load_8bit=True, load_int4=True), "choose one of load_4bit, load_8bit and load_int4"),
    (ModelSpec("some/model", load_int4=True, device="cuda"), "CPU int4 product; it does not combine"),
    (ModelSpec(load_int4=True), "the embedded model is already tiny"),
    (ModelSpec("some/model", max_memory="1GiB", load_int4=True), "max_memory keeps bf16"),
    (ModelSpec(arch="smollm2-135m", load_4bit=True), "arch builds its random weights"),
    (ModelSpec(arch="nope"), "unknown shape preset 'nope'"),
    (ModelSpec(load_8bit=True), "the embedded model is already tiny"),
    (ModelSpec("some/model", max_memory="1GiB", load_8bit=True), "max_memory keeps bf16"),
])
def test_which_model_options_combine_is_decided_by_the_spec(spec, message):
    with pytest.raises(LocretError) as refused:
        spec.checked()
    assert message in str(refused.value)


def test_the_session_reads_with_the_plan_as_it_is(monkeypatch):
    model = tiny_model("llama", layers=4)
    recorded = {"policy": "h2o", "budget": 64, "chunk_size": 16}
    session = Session(LoadedModel(model, byte_tokenizer(), "tiny llama", recorded), None)
    assert session.facts == ModelFacts(recorded, 4, False, PromptTokens.of(model, session.loaded.tokenizer), False)
    plan = session.plan({"stabilizers": 8}, {"max_new_tokens": 300}, questions=["What is it?"])
    estimated = []
    monkeypatch.setattr(Session, "check_memory", lambda self, plan, document:
                        estimated.append((plan.read, plan.cache_entries(), plan.question_room)))
    reading = session.read(text_document(DOCUMENT[:600], "doc"), plan)
    assert reading.settings == plan.read and reading.answering == plan.answer and not reading.warnings
    assert reading.settings.policy == "h2o" and reading.engine.policy.name == "h2o"
    # the memory estimate sees the answer's length, and a short question as the allowance every read keeps for one
    assert estimated == [(plan.read, 64 + 16 + QUESTION_ALLOWANCE + 300, QUESTION_ALLOWANCE)]


def test_ask_json_prints_the_settings_of_its_plan(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    result = CliRunner().invoke(app, ["ask", str(path), "What is the gate code of the north depot?", "--json",
                                      "--budget", "512", "--stabilizers", "600", "--max-new-tokens", "24"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["budget"], data["stabilizers"], data["max_new_tokens"]) == (512, 256, 24)
    assert data["warnings"] == ["stabilizers 600 does not fit in budget 512; using 256"]
    assert result.stderr.count("--stabilizers 600 does not fit in --budget 512; using 256") == 1
