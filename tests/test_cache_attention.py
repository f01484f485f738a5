"""Attention over the cache without a mask (`core/attention/over_cache.py`): the masked attention up to rounding, and the
same logits through the engine's read and decode."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.attention import masked
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model

from locret_cli.core.attention import probe
from locret_cli.core.attention.over_cache import (
    IMPLEMENTATION,
    applies_to,
    cache_attention,
    sliding_attention,
    split_attention,
    use_cache_attention,
)
from locret_cli.core.attention.probe import observe_attention
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings


@pytest.mark.parametrize("length,kept,kv_heads", [(37, 90, 3), (37, 90, 9), (1, 50, 3), (16, 0, 3), (64, 1, 1)])
def test_it_is_the_masked_attention(length, kept, kv_heads):
    torch.manual_seed(length + kept)
    query = torch.randn(1, 9, length, 64)
    key, value = (torch.randn(1, kv_heads, length + kept + 20, 64)[:, :, :length + kept] for _ in range(2))  # views
    assert torch.allclose(cache_attention(query, key, value, 64 ** -0.5), masked(query, key, value), atol=1e-5)


def test_one_bf16_query_is_one_flash_call_over_every_entry():
    """torch's path (`split_attention`; locret's own kernel, where installed, is tests/test_native_attention.py)."""
    torch.manual_seed(0)
    query, key, value = (torch.randn(1, h, n, 64) for h, n in ((9, 1), (3, 300), (3, 300)))
    exact = F.scaled_dot_product_attention(query, key, value, enable_gqa=True)
    out = split_attention(query.bfloat16(), key.bfloat16(), value.bfloat16(), 64 ** -0.5)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 9, 1, 64)
    stacked, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query.bfloat16().reshape(1, 3, 3, 64), key.bfloat16(), value.bfloat16(), 0.0, False, scale=64 ** -0.5)
    assert torch.equal(out, stacked.reshape(1, 9, 1, 64))
    assert (out.float() - exact).abs().max() < 0.02


def logits(model, heads, split: bool) -> torch.Tensor:
    """Read a document, prefill a question and feed 8 fixed tokens: the logits of each forward (9, vocab)."""
    engine = Engine(model, LocretPolicy(heads), ReadSettings(budget=40, chunk_size=32, stabilizers=8),
                    PromptTokens(stop_ids=frozenset()), answering=AnswerSettings(max_new_tokens=16))
    engine.mask_free = split  # the reference: the model's own SDPA with transformers' mask
    engine.read(chunks_of(random_ids(160), 32))
    return torch.stack([engine.forward(ids, score=False) for ids in ([3, 4, 5], *([t] for t in range(10, 18)))])


def test_the_engine_reads_and_decodes_as_with_the_mask(family_model):
    """A random model's logits lie within 1e-6 of each other, so the same logits, not the same argmax, is the check;
    the embedded model's answers in tests/test_reading.py are the greedy check."""
    heads = RetainingHeads.for_model(family_model)
    split, reference = logits(family_model, heads, split=True), logits(family_model, heads, split=False)
    assert torch.allclose(split, reference, rtol=0, atol=1e-5 * reference.abs().max())


def test_it_stands_in_for_sdpa_and_for_an_observers_sdpa_in_either_order():
    model = tiny_model("llama")
    assert applies_to(model)
    with use_cache_attention(model):
        assert model.config._attn_implementation == IMPLEMENTATION
    assert model.config._attn_implementation == "sdpa"
    with observe_attention(model, lambda *_: None):
        assert model.config._attn_implementation == probe.IMPLEMENTATION
        with use_cache_attention(model):
            assert model.config._attn_implementation == probe.MASK_FREE
    with use_cache_attention(model), observe_attention(model, lambda *_: None):
        assert model.config._attn_implementation == probe.MASK_FREE
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"
    with use_cache_attention(model):
        assert model.config._attn_implementation == "eager"


def test_an_observer_hears_the_same_calls_with_and_without_the_mask(family_model):
    """Citations and attention-based policies observe each layer's query and key: attending over the cache without
    the mask while observed changes neither what they hear nor, up to rounding, the logits."""
    heads = RetainingHeads.for_model(family_model)
    heard = {True: [], False: []}
    results = {}
    for split, calls in heard.items():
        def hear(layer, query, key, scaling, calls=calls):
            calls.append((layer, family_model.config._attn_implementation, query, key.shape, scaling))

        with observe_attention(family_model, hear):
            results[split] = logits(family_model, heads, split)
    forwards = 5 + 1 + 8  # chunks read, the question, one token at a time
    assert len(heard[True]) == len(heard[False]) == forwards * family_model.config.num_hidden_layers
    assert {call[1] for call in heard[True]} == {probe.MASK_FREE}
    assert {call[1] for call in heard[False]} == {probe.IMPLEMENTATION}
    for (layer, _, query, keys, scaling), (layer_, _, query_, keys_, scaling_) in zip(heard[True], heard[False]):
        assert (layer, keys, scaling) == (layer_, keys_, scaling_)
        assert torch.allclose(query, query_, rtol=0, atol=1e-5 * query_.abs().max())
    assert torch.allclose(results[True], results[False], rtol=0, atol=1e-5 * results[False].abs().max())


@pytest.mark.parametrize("length, entries, window", [(1, 40, 8), (1, 5, 8), (6, 40, 8), (12, 15, 8), (5, 5, 8)])
def test_a_sliding_layer_sees_itself_and_the_window_before_it(length, entries, window):
    torch.manual_seed(0)
    query = torch.randn(1, 4, length, 16)
    key, value = torch.randn(2, 1, 2, entries, 16)
    rows = torch.arange(entries - length, entries).unsqueeze(1)
    columns = torch.arange(entries).unsqueeze(0)
    band = (columns <= rows) & (rows - columns < window)  # transformers' sliding mask over contiguous positions
    reference = F.scaled_dot_product_attention(query, key.repeat_interleave(2, 1), value.repeat_interleave(2, 1),
                                               attn_mask=band, scale=0.25)
    assert torch.allclose(sliding_attention(query, key, value, 0.25, window), reference, atol=1e-5)
