"""Retaining heads: scores, our format's round trip, official checkpoints, shape checks, and hook hygiene."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.models import tiny_model
from safetensors.torch import save_file
from torch import nn

from locret_cli.core.attention.capture import capture_qkv, check_projections
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError
from locret_cli.models.heads_files import load_heads, save_heads


def sample_qkv(shape: ModelShape, tokens: int = 7):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, tokens, shape.heads * shape.head_dim, generator=g)
    k = torch.randn(1, tokens, shape.kv_heads * shape.head_dim, generator=g)
    v = torch.randn(1, tokens, shape.kv_heads * shape.head_dim, generator=g)
    return q, k, v


def test_score_shape_is_one_per_kv_head(llama):
    heads = RetainingHeads.for_model(llama)
    shape = heads.shape
    assert (shape.heads, shape.kv_heads, shape.head_dim, shape.layers) == (4, 2, 16, 2)
    assert heads.hidden == 1024 and heads.activation == "silu"
    scores = heads.score(1, *sample_qkv(shape))
    assert scores.shape == (1, 2, 7) and scores.dtype == torch.float32


def test_our_format_round_trip(tmp_path, llama):
    heads = RetainingHeads.for_model(llama, hidden=32)
    save_heads(heads, tmp_path / "heads")
    meta = json.loads((tmp_path / "heads" / "heads.json").read_text())
    assert meta["model_shape"] == {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "hidden_size": 64}
    loaded = load_heads(tmp_path / "heads", llama)
    qkv = sample_qkv(heads.shape)
    for layer in range(2):
        torch.testing.assert_close(loaded.score(layer, *qkv), heads.score(layer, *qkv), rtol=0, atol=0)


def test_heads_for_another_model_shape_are_refused(tmp_path, llama):
    save_heads(RetainingHeads.for_model(llama, hidden=32), tmp_path / "heads")
    with pytest.raises(LocretError, match="kv_heads 2 \\(model has 4\\)"):
        load_heads(tmp_path / "heads", tiny_model("mistral"))


def official_state(heads: RetainingHeads, with_bias: bool = True) -> dict[str, torch.Tensor]:
    """Heads renamed as the official Locret checkpoints name them, inside a 'full model' with other weights."""
    state = {"model.embed_tokens.weight": torch.zeros(3, 3), "model.layers.0.self_attn.q_proj.weight": torch.zeros(2)}
    for i, head in enumerate(heads.layers):
        for fc in ("fc1", "fc2"):
            state[f"model.layers.{i}.self_attn.{fc}.weight"] = getattr(head, fc).weight.detach().clone()
            if with_bias:
                state[f"model.layers.{i}.self_attn.{fc}.bias"] = getattr(head, fc).bias.detach().clone()
    return state


@pytest.mark.parametrize("kind", ["bin", "safetensors", "directory"])
def test_official_checkpoint_round_trip(tmp_path, llama, kind):
    heads = RetainingHeads.for_model(llama, hidden=48)
    state = official_state(heads)
    if kind == "bin":
        path = tmp_path / "pytorch_model.bin"
        torch.save(state, path)
    else:
        half = len(state) // 2
        items = list(state.items())
        save_file(dict(items[:half]), str(tmp_path / "model-00001-of-00002.safetensors"))
        save_file(dict(items[half:]), str(tmp_path / "model-00002-of-00002.safetensors"))
        path = tmp_path if kind == "directory" else tmp_path / "model-00001-of-00002.safetensors"
        if kind == "safetensors":  # a single file holding every head
            save_file(state, str(tmp_path / "single.safetensors"))
            path = tmp_path / "single.safetensors"
    loaded = load_heads(path, llama)
    assert loaded.hidden == 48
    qkv = sample_qkv(heads.shape)
    for layer in range(2):
        torch.testing.assert_close(loaded.score(layer, *qkv), heads.score(layer, *qkv), rtol=0, atol=0)


def test_official_checkpoint_without_biases(tmp_path, llama):
    heads = RetainingHeads.for_model(llama, hidden=16)
    for head in heads.layers:
        nn.init.zeros_(head.fc1.bias)
        nn.init.zeros_(head.fc2.bias)
    torch.save(official_state(heads, with_bias=False), tmp_path / "heads.bin")
    loaded = load_heads(tmp_path / "heads.bin", llama)
    assert loaded.layers[0].fc1.bias is None
    qkv = sample_qkv(heads.shape)
    torch.testing.assert_close(loaded.score(0, *qkv), heads.score(0, *qkv), rtol=1e-6, atol=1e-6)


def test_official_checkpoint_of_the_wrong_model_is_refused(tmp_path, llama):
    torch.save(official_state(RetainingHeads.for_model(tiny_model("mistral"), hidden=8)), tmp_path / "h.bin")
    with pytest.raises(LocretError, match="one per KV head"):
        load_heads(tmp_path / "h.bin", llama)


def test_pickles_that_are_not_plain_weights_are_refused(tmp_path, llama):
    torch.save({"model.layers.0.self_attn.fc1.weight": torch.zeros(1), "evil": object()}, tmp_path / "h.bin")
    with pytest.raises(LocretError, match="weights-only"):
        load_heads(tmp_path / "h.bin", llama)


def test_files_without_heads_are_refused(tmp_path, llama):
    save_file({"model.embed_tokens.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(LocretError, match="no retaining heads"):
        load_heads(tmp_path, llama)


def manual_qkv(model, layer_idx: int, hidden: torch.Tensor):
    """The layer's q, k and v computed by hand from its input: norm, then the projections, no RoPE."""
    layer = model.model.layers[layer_idx]
    attn, x = layer.self_attn, layer.input_layernorm(hidden)
    if hasattr(attn, "qkv_proj"):
        shape = ModelShape.from_config(model.config)
        kv = shape.kv_heads * shape.head_dim
        return attn.qkv_proj(x).split([shape.heads * shape.head_dim, kv, kv], dim=-1)
    return attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)


@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3"])
def test_capture_hands_over_pre_rope_projections_and_removes_hooks(family):
    """What the heads are fed equals each layer's own projections of its input, before RoPE (and before Qwen3's
    q/k norm), computed by hand; every hook is gone after the block, even when it raises."""
    model = tiny_model(family)
    attn = model.model.layers[0].self_attn
    projections = [attn.qkv_proj] if family == "phi3" else [attn.q_proj, attn.k_proj, attn.v_proj]
    seen, ids = {}, torch.tensor([[3, 4, 5, 9, 11]])
    with torch.no_grad(), pytest.raises(RuntimeError, match="boom"):
        with capture_qkv(model, lambda i, q, k, v: seen.setdefault(i, (q, k, v))):
            hidden = model(ids, output_hidden_states=True).hidden_states  # hidden_states[i] enters layer i
            assert all(p._forward_hooks for p in projections)
            raise RuntimeError("boom")
    assert all(not p._forward_hooks for p in projections)
    assert sorted(seen) == [0, 1]
    with torch.no_grad():
        for layer_idx, captured in seen.items():
            for got, want in zip(captured, manual_qkv(model, layer_idx, hidden[layer_idx])):
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_attention_without_projections_is_refused(llama):
    for layer in llama.model.layers:
        del layer.self_attn.q_proj
    with pytest.raises(LocretError, match="no q_proj/k_proj/v_proj"):
        check_projections(llama)
