"""Before a run: its memory is estimated and a run that cannot fit is refused in one line (unless
--no-memory-check), and the settings it is given are validated."""

from __future__ import annotations

import json

import pytest
from helpers.byte_tokenizers import byte_tokenizer
from helpers.models import tiny_model
from typer.testing import CliRunner

from locret_cli.api import Session
from locret_cli.cli import app
from locret_cli.core import measure
from locret_cli.core.measure import plan_memory
from locret_cli.errors import LocretError
from locret_cli.models.loading import LoadedModel
from locret_cli.settings import AnswerSettings, ReadSettings

runner = CliRunner()
TEXT = "The gate code of the north depot is 4821. " * 40


@pytest.fixture
def doc(tmp_path):
    (tmp_path / "doc.txt").write_text(TEXT)
    return tmp_path / "doc.txt"


def tiny_session(policy="streaming") -> Session:
    return Session(LoadedModel(tiny_model("llama"), byte_tokenizer(), "tiny llama", {"policy": policy}), None)


@pytest.mark.parametrize("positions", ["compact", "original"])
def test_the_estimated_cache_is_what_the_engine_holds_at_its_peak(doc, positions):
    """Compact positions move keys, and moved keys keep their unrotated copy; original positions never move them."""
    session = tiny_session()
    settings = ReadSettings(policy="streaming", budget=64, chunk_size=32, stabilizers=8, positions=positions)
    result = session.ask(str(doc), "What is the gate code?", settings,
                         AnswerSettings(max_new_tokens=3))
    plan = plan_memory(session.loaded.model, result.kv_cache.peak_tokens, 32, keys_move=positions == "compact")
    assert plan.cache_bytes == result.kv_cache.peak_bytes
    assert plan.activation_bytes > 0 and plan.available_bytes > 0


def test_a_run_that_cannot_fit_is_refused_unless_forced(doc, monkeypatch):
    session = tiny_session()
    settings = ReadSettings(policy="streaming", budget=64, chunk_size=32, stabilizers=8)
    answering = AnswerSettings(max_new_tokens=2)
    monkeypatch.setattr(measure, "available_memory", lambda device: 1000)
    with pytest.raises(LocretError, match="only 1000 B is free; lower budget, or pass force to run anyway"):
        session.ask(str(doc), "What is the gate code?", settings, answering)
    assert session.ask(str(doc), "What is the gate code?", settings, answering, force=True).kv_cache.kept_tokens == 64


def test_a_full_cache_is_estimated_from_the_text_files_size(doc, monkeypatch):
    session = tiny_session("full")
    monkeypatch.setattr(measure, "available_memory", lambda device: 1000)
    with pytest.raises(LocretError, match="lower the document's length"):
        session.ask(str(doc), "What is the gate code?", answering=AnswerSettings(max_new_tokens=2))


@pytest.mark.parametrize("option, value, named", [("--budget", 10**9, "--budget"), ("--chunk-size", 3 * 10**6,
                                                                                       "--chunk-size")])
def test_the_cli_names_the_setting_to_lower_in_one_line(doc, option, value, named):
    result = runner.invoke(app, ["ask", str(doc), "What is the gate code?", option, str(value), "-q"])
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"lower {named}, or pass --no-memory-check" in result.stderr


def test_no_memory_check_runs_what_the_estimate_would_refuse(doc):
    result = runner.invoke(app, ["ask", str(doc), "What is the gate code?", "--budget", str(10**9),
                                 "--no-memory-check", "--json", "--no-strict"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["budget"] == 10**9


@pytest.mark.parametrize("bad, message", [(dict(budget=0), "^budget must be positive"),
                                          (dict(score_pool=4), "^score_pool must be a positive odd number"),
                                          (dict(positions="sideways"), "^positions must be compact or original")])
def test_ask_validates_the_settings_it_is_given(doc, bad, message):
    with pytest.raises(LocretError, match=message):
        tiny_session().ask(str(doc), "What is the gate code?", ReadSettings(policy="streaming", **bad))


def test_ask_clips_given_stabilizers_with_a_warning(doc):
    settings = ReadSettings(policy="streaming", budget=64, chunk_size=32, stabilizers=64)
    result = tiny_session().ask(str(doc), "q?", settings, AnswerSettings(max_new_tokens=1))
    assert result.settings.stabilizers == 32
    assert any("does not fit" in w for w in result.warnings)


def test_a_process_peak_is_its_own_not_its_parents(tmp_path):
    """A process started by one that holds much more memory reports its own peak RSS, not the parent's (which
    `ru_maxrss` carries over on Linux): a bench cell, a subprocess, measures itself."""
    import os
    import subprocess
    import sys

    import torch

    if not os.path.exists("/proc/self/status"):
        pytest.skip("reads /proc/self/status, which only Linux has")
    held = bytearray(1 << 30)  # 1 GiB, touched page by page so that it is resident
    held[::4096] = b"x" * len(held[::4096])
    child = subprocess.run([sys.executable, "-c", "import torch; from locret_cli.core.measure import peak_memory; "
                            "print(peak_memory(torch.device('cpu'))[0])"], capture_output=True, text=True, check=True)
    assert int(child.stdout) < len(held) < measure.peak_memory(torch.device("cpu"))[0]
