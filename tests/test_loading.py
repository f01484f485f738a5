"""Model loading choices: dtype resolution and local directories with a tiktoken tokenizer."""

from __future__ import annotations

import torch

from conftest import tiny_model
from locret_cli import loading
from locret_cli.loading import load_model, resolve_dtype
from locret_cli.synthetic import distinct_facts, document, passkey_fact
from locret_cli.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer


def test_auto_dtype_is_bf16_only_where_it_is_fast(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(loading, "cpu_has_fast_bf16", lambda: True)
    assert resolve_dtype("auto", cpu) == torch.bfloat16
    monkeypatch.setattr(loading, "cpu_has_fast_bf16", lambda: False)
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("fp16", cpu) == torch.float16


def test_local_directory_with_a_tiktoken_tokenizer(tmp_path):
    tiny_model("qwen2").save_pretrained(tmp_path)
    TiktokenTokenizer.byte_level().save(tmp_path / TIKTOKEN_FILE)
    loaded = load_model(str(tmp_path), device="cpu", dtype="fp32")
    assert isinstance(loaded.tokenizer, TiktokenTokenizer)
    assert loaded.model.config.model_type == "qwen2" and loaded.model.dtype == torch.float32


def test_synthetic_documents_are_seeded_and_hold_their_facts():
    import random

    facts = distinct_facts(random.Random(1), 5) + [passkey_fact(random.Random(2))]
    assert len({f.question for f in facts}) == 6
    placed = [(fact, i / 5) for i, fact in enumerate(facts)]
    text = document(7, 40, placed)
    assert text == document(7, 40, placed)
    positions = [text.index(fact.statement) for fact in facts]
    assert positions == sorted(positions)  # deeper facts sit further in
