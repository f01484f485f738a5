"""compiled_decode's modes decode the same greedy tokens as the shipped packed step, on a tiny Llama."""

from __future__ import annotations

import pytest
import torch
from helpers.models import tiny_model

from research.cpu import compiled_decode


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


def test_packed_eager_and_compiled_mlp_decode_the_same_tokens(monkeypatch):
    monkeypatch.setattr(compiled_decode, "random_model", lambda preset, dtype: tiny_model("llama").to(dtype))
    tokens = {mode: compiled_decode.measure("tiny", mode, 64, 32, 6)[2] for mode in ("packed", "eager", "compile-mlp")}
    assert len(tokens["packed"]) == 6
    assert tokens["eager"] == tokens["packed"] and tokens["compile-mlp"] == tokens["packed"]
