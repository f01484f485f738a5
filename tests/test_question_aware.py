"""Question-aware reading (FINCH, `--policy finch`): the question read after every chunk scores the entries by the
attention it pays them, then leaves the cache; a read without questions, or under another policy, is unchanged."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers.attention import reference_finch_scores
from helpers.documents import DOCUMENT
from helpers.engines import chunks_of, random_ids
from typer.testing import CliRunner

from locret_cli.api import Session, load_session
from locret_cli.api.plan import ModelFacts, resolve
from locret_cli.api.saved_context import save_reading
from locret_cli.cli import app
from locret_cli.core.engine import Engine
from locret_cli.core.policies.attention import FinchPolicy
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings

runner = CliRunner()


def test_finch_scores_are_the_questions_normalised_attention(llama):
    ids, question = random_ids(24), random_ids(5, seed=2)
    settings = ReadSettings(budget=64, chunk_size=24, stabilizers=4, positions="original")
    engine = Engine(llama, FinchPolicy(16, len(question)), settings, PromptTokens(stop_ids=frozenset({1})),
                    question_ids=question)
    engine.prefill_chunk(ids)
    assert engine.seen == 24 and engine.cache.length() == 24  # the question's entries are gone
    for layer, expected in zip(engine.cache.layers, reference_finch_scores(llama, ids, question)):
        assert layer.origins[0, 0].tolist() == list(range(24))
        torch.testing.assert_close(layer.scores[0], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("positions", ["original", "compact"])
def test_the_question_never_stays_in_the_cache(llama, positions):
    question = random_ids(6, seed=3)
    settings = ReadSettings(budget=20, chunk_size=8, stabilizers=3, positions=positions)
    engine = Engine(llama, FinchPolicy(16, len(question)), settings, PromptTokens(stop_ids=frozenset({1})),
                    question_ids=question)
    for chunk in chunks_of(random_ids(64), 8):
        engine.prefill_chunk(chunk.ids)
        for layer in engine.cache.layers:
            assert int(layer.origins.max()) < engine.seen
            assert layer.length == min(engine.seen, 20)


def test_finch_without_a_question_is_refused():
    with pytest.raises(SettingError, match="reads the document with its questions"):
        resolve(ModelFacts({}, 2, False, PromptTokens()),
                ReadSettings(policy="finch", budget=20, chunk_size=8, stabilizers=3), questions=())


@pytest.fixture(scope="module")
def embedded():
    return load_session(device="cpu")


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    return path


def test_other_policies_ignore_questions_and_save_the_same_file(embedded, document, tmp_path):
    plain = embedded.read(str(document))
    asked = embedded.read(str(document), questions=["What is the gate code of the north depot?"])
    assert asked.read_for == ()
    files = []
    for name, reading in (("plain", plain), ("asked", asked)):
        reading.document.read_s = 1.0  # the one field that differs between two reads: how long each took
        save_reading(reading, tmp_path / f"{name}.locret", embedded.heads)
        files.append((tmp_path / f"{name}.locret").read_bytes())
    assert files[0] == files[1] and b"read_for" not in files[0]


def test_a_finch_read_records_its_questions_and_keeps_them_when_saved(embedded, document, tmp_path):
    finch = Session(replace(embedded.loaded, defaults={**embedded.loaded.defaults, "policy": "finch"}), embedded.heads)
    question = "What is the gate code of the north depot?"
    result = finch.ask(str(document), question)
    assert result.read_for == (question,) and result.to_json()["read_for"] == [question]
    reading = finch.read(str(document), questions=[question, "Who counts the sacks?"])
    save_reading(reading, tmp_path / "finch.locret", embedded.heads)
    assert finch.open(str(tmp_path / "finch.locret")).read_for == (question, "Who counts the sacks?")


def test_the_command_line_reads_for_questions_and_refuses_finch_without_them(document, tmp_path):
    out = tmp_path / "doc.locret"
    refused = runner.invoke(app, ["read", str(document), "-o", str(out), "--policy", "finch", "--quiet"])
    assert refused.exit_code == 1 and not out.exists()
    assert "the --policy finch policy reads the document with its questions" in refused.output
    assert "--questions" in refused.output and "Traceback" not in refused.output
    done = runner.invoke(app, ["read", str(document), "-o", str(out), "--policy", "finch", "-Q",
                               "What is the gate code of the north depot?", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["read_for"] == ["What is the gate code of the north depot?"]
    ignored = runner.invoke(app, ["read", str(document), "-o", str(tmp_path / "plain.locret"), "-Q", "Why?", "--json"])
    assert ignored.exit_code == 0 and json.loads(ignored.stdout)["read_for"] == []
    assert ("questions steer only --policy finch, or locret with --question-share above 0; locret read the document "
            "question-agnostic") in ignored.stderr
