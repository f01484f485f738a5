"""The decode step compiled whole (`core/answer/compiled_step.py`, `--compile-decode`): transformers' greedy tokens, the
same cache afterwards and the same citations, in bf16 and fp32, and with int8 weights; the own step where the graph
does not hold the case. Compiling needs a C++ compiler (inductor's CPU backend): without one these tests are skipped."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import ask
from helpers.documents import DOCUMENT
from helpers.engines import chunks_of, random_ids
from helpers.models import save_model_dir, tiny_model
from helpers.readers import strong_reader

from locret_cli.core.answer.citations import AttentionTally
from locret_cli.core.answer.compiled_step import ATTRIBUTE, CompiledStep, compile_decode, cpp_compiler
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.runtime import int4_linear, int8_linear
from locret_cli.runtime.int8_linear import quantize_linears
from locret_cli.settings import AnswerSettings, ReadSettings

pytestmark = pytest.mark.skipif(cpp_compiler() is None, reason="inductor's CPU backend needs a C++ compiler")


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def compiled_model(request):
    model = tiny_model("llama").to(request.param)
    assert compile_decode(model)
    return model


def answer(model, compiled: bool, kv_bits: int = 16, reader=None, cite: bool = False):
    """Read a document, answer greedily: (tokens, the cache's fields after the answer, the tally's attention)."""
    torch.manual_seed(1)
    heads = RetainingHeads.for_model(model).to(model.dtype)
    engine = Engine(model, LocretPolicy(heads), ReadSettings(budget=40, chunk_size=32, stabilizers=8, kv_bits=kv_bits),
                    answering=AnswerSettings(max_new_tokens=12), reader=reader)
    assert isinstance(engine.step, CompiledStep)
    if not compiled:
        engine.step = None  # transformers' forward
    engine.read(chunks_of(random_ids(160), 32))
    tally = AttentionTally(len(engine.cache.layers), engine.kept_tokens) if cite else None
    fork = engine.fork()
    tokens = fork.answer([3, 4, 5], tally=tally).token_ids
    fields = [layer.tensors() for layer in fork.cache.layers]
    cited = [tally.received(i, layer.keys) for i, layer in enumerate(fork.cache.layers)] if cite else []
    untouched = [layer.length for layer in engine.cache.layers]
    return tokens, fields, cited, untouched


def own_step_calls(model, monkeypatch, allowed: bool) -> list:
    """The calls the compiled step hands to the own step (failing at once where none is `allowed`)."""
    step, calls = getattr(model, ATTRIBUTE), []
    own = step.own

    def counted(*arguments):
        if not allowed:
            pytest.fail("the own step answered")
        calls.append(arguments)
        return own(*arguments)

    monkeypatch.setattr(step, "own", counted)
    return calls


def test_the_same_tokens_cache_and_citations_as_transformers(compiled_model, monkeypatch):
    own_step_calls(compiled_model, monkeypatch, allowed=False)
    tokens, fields, cited, untouched = answer(compiled_model, compiled=True, cite=True)
    reference, reference_fields, reference_cited, reference_untouched = answer(compiled_model, compiled=False,
                                                                               cite=True)
    assert len(tokens) == 12 and tokens == reference
    assert untouched == reference_untouched  # the read that was forked keeps its entries
    for layer, expected in zip(fields, reference_fields):
        assert layer.keys() == expected.keys()
        for name in ("scores", "positions", "origins"):
            assert torch.equal(layer[name], expected[name]), name
        for name in ("keys", "values"):
            torch.testing.assert_close(layer[name], expected[name], rtol=0.02, atol=0.02)
    for weights, expected in zip(cited, reference_cited):
        torch.testing.assert_close(weights, expected, rtol=0.02, atol=1e-3)


def test_the_own_step_answers_for_a_quantized_cache_and_a_reader(compiled_model, monkeypatch):
    calls = own_step_calls(compiled_model, monkeypatch, allowed=True)
    assert answer(compiled_model, True, kv_bits=8)[0] == answer(compiled_model, False, kv_bits=8)[0]
    assert len(calls) == 11  # every step after the question's forward
    reader = strong_reader(compiled_model)
    assert answer(compiled_model, True, reader=reader)[0] == answer(compiled_model, False, reader=reader)[0]
    assert len(calls) == 22


@pytest.mark.parametrize("family,fits", [("llama", True), ("qwen2", True), ("qwen3", False), ("gemma3", False)])
def test_only_models_the_graph_holds_are_compiled(family, fits):
    model = tiny_model(family)
    assert compile_decode(model) is fits
    assert hasattr(model, ATTRIBUTE) is fits


def test_the_cli_answers_the_same_compiled_and_refuses_a_model_it_cannot_compile(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text(DOCUMENT)
    llama = str(save_model_dir(tiny_model("llama"), tmp_path / "llama"))
    options = ("--model", llama, "--policy", "streaming", "--max-new-tokens", "6", "--json")
    compiled = ask(doc, "q?", *options, "--compile-decode")
    assert compiled.exit_code == 0, compiled.output
    assert json.loads(compiled.output)["answer"] == json.loads(ask(doc, "q?", *options).output)["answer"]
    gemma = str(save_model_dir(tiny_model("gemma3"), tmp_path / "gemma3"))
    refused = ask(doc, "q?", "--model", gemma, "--policy", "streaming", "--compile-decode")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "--compile-decode compiles Llama, Mistral and Qwen2 decoders on the CPU; this model is gemma3" in \
        refused.output


@pytest.mark.parametrize("bits", [8, 4])
def test_int8_and_4bit_weights_are_compiled_too(bits, monkeypatch):
    model = tiny_model("llama").to(torch.bfloat16)
    quantize_linears(model, bits)
    kinds = {type(module).__name__ for module in model.modules()}
    assert ("Int4Linear" in kinds) is (bits == 4) and "Int8Linear" in kinds  # 4 bits: k/v and the head stay int8
    assert compile_decode(model)
    own_step_calls(model, monkeypatch, allowed=False)
    rows, four_bit_rows = [], []
    monkeypatch.setattr("locret_cli.runtime.int8_linear.int8_rows_product",
                        lambda x, *rest, real=int8_linear.int8_rows_product, **most: rows.append(x.shape[0])
                        or real(x, *rest, **most))
    monkeypatch.setattr("locret_cli.runtime.int4_linear.int4_rows_product",
                        lambda x, *rest, real=int4_linear.int4_rows_product, **most: four_bit_rows.append(x.shape[0])
                        or real(x, *rest, **most))
    compiled = answer(model, True)[0]
    assert 1 in rows  # the graph's steps call locret's int8 kernel through its operator (the question is 3 rows)
    assert (1 in four_bit_rows) is (bits == 4)  # and the 4-bit layers the 4-bit kernel, through its own
    assert compiled == answer(model, False)[0]
