"""locret's own decode step (`core/answer/decode_step.py`): transformers' logits bit for bit, with int8 linears, the reader,
an observer (citations) and a quantized cache, in fp32 and bf16; and the families it is for."""

from __future__ import annotations

import pytest
import torch
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model
from helpers.readers import strong_reader

from locret_cli.core.answer.citations import AttentionTally
from locret_cli.core.answer.decode_step import DecodeStep
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.runtime.int8_linear import quantize_linears
from locret_cli.settings import AnswerSettings, ReadSettings


def answer(model, own: bool, kv_bits: int = 16, reader=None, cite: bool = False):
    """Read a document, then answer a question greedily: (each step's logits, the tokens, the citation tally's
    per-layer attention), with locret's step or with transformers' forward."""
    torch.manual_seed(1)
    heads = RetainingHeads.for_model(model).to(model.dtype)
    engine = Engine(model, LocretPolicy(heads), ReadSettings(budget=40, chunk_size=32, stabilizers=8, kv_bits=kv_bits),
                    answering=AnswerSettings(max_new_tokens=10), reader=reader)
    assert engine.step is not None
    engine.step = engine.step if own else None
    engine.read(chunks_of(random_ids(160), 32))
    seen, pick = [], engine.sampler.pick
    engine.sampler.pick = lambda logits: (seen.append(logits), pick(logits))[1]
    tally = AttentionTally(len(engine.cache.layers), engine.kept_tokens) if cite else None
    tokens = engine.answer([3, 4, 5], tally=tally).token_ids
    cited = [tally.received(i, layer.keys) for i, layer in enumerate(engine.cache.layers)] if cite else []
    return torch.stack(seen), tokens, cited


def same_answer(model, **options) -> None:
    logits, tokens, cited = answer(model, own=True, **options)
    reference, reference_tokens, reference_cited = answer(model, own=False, **options)
    assert len(tokens) == 10 and tokens == reference_tokens
    assert torch.equal(logits, reference)
    assert all(torch.equal(a, b) for a, b in zip(cited, reference_cited))


def test_the_step_gives_transformers_logits_bit_for_bit(family_model):
    same_answer(family_model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_with_int8_linears_a_quantized_cache_and_citations(dtype):
    model = tiny_model("llama").to(dtype)
    quantize_linears(model)
    same_answer(model, kv_bits=8, cite=True)


def test_with_the_reader_in_force():
    model = tiny_model("llama")
    same_answer(model, reader=strong_reader(model))


@pytest.mark.parametrize("family,fits", [("llama", True), ("qwen2", True), ("mistral", True), ("qwen3", False),
                                         ("phi3", False), ("gemma3", False)])
def test_it_is_for_the_llama_family_without_a_sliding_window(family, fits):
    model = tiny_model(family)
    assert DecodeStep.fits(model) is fits
    assert (Engine(model, LocretPolicy(RetainingHeads.for_model(model)), ReadSettings(budget=40, chunk_size=32,
                   stabilizers=8), PromptTokens(stop_ids=frozenset())).step is not None) is fits
