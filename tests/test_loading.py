"""Model loading choices: dtype resolution and local directories with a tiktoken tokenizer."""

from __future__ import annotations

import torch
from helpers.models import tiny_model

from locret_cli.bench.synthetic import passkey_fact
from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.models import loading
from locret_cli.models.loading import load_model, resolve_dtype
from locret_cli.runtime.dtype_probe import DtypeChoice
from recipes.sample_documents import distinct_facts, document


def test_auto_dtype_is_measured_on_the_cpu_and_bf16_on_cuda(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(loading, "measured_cpu_dtype", lambda: DtypeChoice(torch.float32, "fp32: measured"))
    assert loading.choose_dtype("auto", cpu) == DtypeChoice(torch.float32, "fp32: measured")
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert loading.choose_dtype("fp16", cpu) == DtypeChoice(torch.float16, "fp16: asked for")


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
