"""Refusals that the model's files decide come before its weights load: no shipped heads for its shape or its
weights, heads of another shape; and a tiny random Qwen2 model reads, evicts and answers with its shipped heads."""

from __future__ import annotations

import json

import pytest
from helpers.gguf_files import tiny_llama, write_gguf
from helpers.heads import save_heads_for
from helpers.models import save_model_dir, tiny_model

from locret_cli.api import load_session, session
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.documents import text_document
from locret_cli.models import preflight, shipped


@pytest.fixture
def never_loads(monkeypatch):
    def load_model(*args, **kwargs):
        raise AssertionError("the weights were loaded before the refusal")

    monkeypatch.setattr(session, "load_model", load_model)


@pytest.fixture
def shipped_root(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    root.mkdir()
    monkeypatch.setattr(shipped, "HEADS_ROOT", root)
    return root


def test_a_model_of_a_shape_no_heads_ship_for_is_refused_before_it_loads(tmp_path, shipped_root, never_loads):
    save_heads_for(tiny_model("llama", seed=0), shipped_root / "llama")
    model_dir = save_model_dir(tiny_model("qwen2"), tmp_path / "qwen2")
    with pytest.raises(SettingError, match="none ship for it"):
        load_session(str(model_dir), device="cpu", dtype="fp32")


def test_other_weights_of_a_shipped_shape_are_refused_before_they_load(tmp_path, shipped_root, never_loads):
    save_heads_for(tiny_model("llama", seed=0), shipped_root / "llama")
    model_dir = save_model_dir(tiny_model("llama", seed=2), tmp_path / "other")
    with pytest.raises(SettingError, match="none ship for it"):
        load_session(str(model_dir), device="cpu", dtype="fp32")


def test_heads_of_another_shape_are_refused_before_the_model_loads(tmp_path, never_loads):
    heads = save_heads_for(tiny_model("llama", seed=0, layers=3), tmp_path / "heads")
    model_dir = save_model_dir(tiny_model("qwen2"), tmp_path / "qwen2")
    with pytest.raises(LocretError, match=r"trained for another model shape: layers 3 \(model has 2\)$"):
        load_session(str(model_dir), heads=str(heads), device="cpu", dtype="fp32")


def test_policies_without_heads_pass_the_preflight(tmp_path, shipped_root):
    model_dir = save_model_dir(tiny_model("qwen2"), tmp_path / "qwen2")
    assert load_session(str(model_dir), reads_with="streaming", device="cpu", dtype="fp32").heads is None


def test_a_gguf_files_shape_is_read_from_its_header(tmp_path):
    path = tmp_path / "tiny.gguf"
    model = write_gguf(path, tiny_llama())
    assert preflight.shape_of(str(path)) == ModelShape.from_config(model.config)


def test_a_tiny_qwen2_reads_evicts_and_answers_with_its_shipped_heads(tmp_path, shipped_root):
    model = tiny_model("qwen2")
    defaults = {"budget": 48, "chunk_size": 16, "stabilizers": 4}
    save_heads_for(model, shipped_root / "qwen2", defaults)
    model_dir = save_model_dir(model, tmp_path / "qwen2")
    loaded = load_session(str(model_dir), device="cpu", dtype="fp32")
    assert loaded.heads is not None and loaded.plan().read.budget == 48
    reading = loaded.read(text_document("The gate code is 4821. " + "Words go by. " * 60))
    result = reading.ask("What is the gate code?", sources=0)
    assert result.policy == "locret" and result.route == "bounded-cache"
    assert result.kv_cache.kept_tokens <= 48 < result.document.tokens  # evicted to the budget
    assert result.speed.decode_steps > 0 and json.loads(json.dumps(result.to_json()))["answer"] == result.answer
