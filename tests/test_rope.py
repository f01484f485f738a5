"""Re-rotating a cached key must equal computing RoPE afresh from its pre-RoPE key at the new position."""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import DynamicCache, GPT2Config

from conftest import ROPE_VARIANTS, tiny_model
from locret_cli.engine import Engine, Settings
from locret_cli.policies import make_policy
from test_engine import chunks_of, random_ids
from locret_cli.errors import LocretError
from locret_cli.rope import (
    check_supported,
    frequencies_for,
    rerotation_angles,
    rotary_module,
    rotate,
    shift_table,
    turn,
)


def rope_at(model, family, pre_rope_keys, positions):
    """What the model itself stores for keys at `positions`: its rotary module and its apply_rotary_pos_emb."""
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cos, sin = rotary_module(model)(pre_rope_keys, positions.view(1, -1))
    _, keys = module.apply_rotary_pos_emb(pre_rope_keys, pre_rope_keys, cos, sin)
    return keys


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "phi3", *ROPE_VARIANTS])
def test_rerotation_equals_fresh_rope(family):
    """Every supported family, and Llama under each supported RoPE scaling (linear, dynamic NTK, YaRN)."""
    rope = ROPE_VARIANTS.get(family)
    model = tiny_model("llama", rope=rope) if rope else tiny_model(family)
    family = "llama" if rope else family
    rotary = rotary_module(model)
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    keys = torch.randn(1, 2, 6, head_dim, generator=torch.Generator().manual_seed(3))
    old = torch.tensor([0, 5, 17, 100, 200, 250])
    new = torch.tensor([0, 1, 2, 3, 4, 5])  # compact renumbering moves keys backwards
    freq = frequencies_for(rotary, old)
    assert torch.equal(freq, frequencies_for(rotary, new))
    stored = rope_at(model, family, keys, old)
    angles = rerotation_angles(old.expand(1, 2, 6), new.expand(1, 2, 6), freq, freq)
    torch.testing.assert_close(rotate(stored, angles), rope_at(model, family, keys, new), rtol=1e-5, atol=1e-5)


def test_rerotation_across_a_longrope_frequency_switch():
    model = tiny_model("phi3")
    rotary = rotary_module(model)
    keys = torch.randn(1, 4, 5, 16, generator=torch.Generator().manual_seed(4))
    short_positions, long_positions = torch.tensor([1, 2, 30, 90, 200]), torch.tensor([300, 301, 400, 700, 900])
    short = frequencies_for(rotary, short_positions)
    stored = rope_at(model, "phi3", keys, short_positions)
    long = frequencies_for(rotary, long_positions)
    assert not torch.equal(short, long)
    angles = rerotation_angles(short_positions.expand(1, 4, 5), long_positions.expand(1, 4, 5), short, long)
    want = rope_at(model, "phi3", keys, long_positions)
    torch.testing.assert_close(rotate(stored, angles), want, rtol=1e-5, atol=1e-5)


def test_dynamic_ntk_growth_moves_cached_keys_to_the_new_frequencies():
    """Dynamic NTK rescales its frequencies whenever the input grows past max_position_embeddings (here 128): after
    a chunked read of 300 tokens, layer 0's cached keys (which depend only on the tokens) equal those of one pass."""
    model = tiny_model("llama", rope=ROPE_VARIANTS["dynamic"], max_positions=128)
    ids = random_ids(300)
    engine = Engine(model, make_policy("full", model), Settings(budget=400, chunk_size=64, positions="original"), {1})
    frequencies = []
    for chunk in chunks_of(ids, 64):
        engine.prefill_chunk(chunk.ids)
        frequencies.append(engine.cache.frequencies)
    assert torch.equal(frequencies[0], frequencies[1]) and not torch.equal(frequencies[1], frequencies[2])
    reference = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([ids]), past_key_values=reference, use_cache=True)
    torch.testing.assert_close(engine.cache.layers[0].keys, reference.layers[0].keys, rtol=1e-5, atol=1e-5)


def test_bf16_rerotation_error_stays_at_bf16_rounding():
    model = tiny_model("llama").to(torch.bfloat16)
    rotary = rotary_module(model)
    keys = torch.randn(1, 2, 4, 16, generator=torch.Generator().manual_seed(5)).bfloat16()
    old, new = torch.tensor([10, 20, 30, 40]), torch.tensor([0, 1, 2, 3])
    freq = frequencies_for(rotary, old)
    stored = rope_at(model, "llama", keys, old)
    moved = rotate(stored, rerotation_angles(old.expand(1, 2, 4), new.expand(1, 2, 4), freq, freq))
    assert moved.dtype == torch.bfloat16
    torch.testing.assert_close(moved, rope_at(model, "llama", keys, new), rtol=2e-2, atol=2e-2)


def test_unsupported_model_types_and_rope_types_are_refused():
    with pytest.raises(LocretError, match="gpt2"):
        check_supported(GPT2Config())
    config = tiny_model("qwen2").config
    config.rope_parameters = {"rope_type": "mrope", "rope_theta": 10000.0}
    with pytest.raises(LocretError, match="mrope"):
        check_supported(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_shift_table_turns_keys_exactly_as_per_key_angles_do(dtype):
    """Compact renumbering reads cos and sin from one table of shifts; the keys it gives must equal, to the bit,
    the per-key float64 angles it replaced, including with partial rotary (the last channels pass through)."""
    generator = torch.Generator().manual_seed(5)
    freq = 1.0 / 10000 ** (torch.arange(0, 12, 2, dtype=torch.float32) / 12)  # rotary_dim 12 of head_dim 16
    keys = torch.randn(1, 3, 40, 16, generator=generator).to(dtype)
    old = torch.randint(0, 3000, (1, 3, 40), generator=generator, dtype=torch.int32)
    new = torch.randint(0, 1024, (1, 3, 40), generator=generator, dtype=torch.int32)
    shift = new - old
    low, high = int(shift.min()), int(shift.max())
    cos, sin = shift_table(low, high, freq)
    assert cos.shape == (high - low + 1, 6)
    index = (shift - low).long()
    assert torch.equal(turn(keys, cos[index], sin[index]), rotate(keys, rerotation_angles(old, new, freq, freq)))
