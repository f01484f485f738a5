"""Labels from the blocked in-attention reduction equal a dense brute-force QKᵀ with GQA grouping."""

from __future__ import annotations

import importlib

import pytest
import torch

from conftest import tiny_model
from locret_cli.training import labels as labels_module
from locret_cli.training.labels import LabelCache, compute_labels


def brute_force_labels(model, family, ids: list[int], prompt_length: int) -> torch.Tensor:
    """Rebuild every layer's post-RoPE q and k from its input hidden states, take the dense score matrix, reduce."""
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        positions = torch.arange(len(ids)).unsqueeze(0)
        out = []
        for layer_idx, layer in enumerate(model.model.layers):
            x = layer.input_layernorm(hidden[layer_idx])
            attn = layer.self_attn
            shape = (1, len(ids), -1, attn.head_dim)
            q = attn.q_proj(x).view(shape).transpose(1, 2)
            k = attn.k_proj(x).view(shape).transpose(1, 2)
            cos, sin = model.model.rotary_emb(x, positions)
            q, k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
            group = q.shape[1] // k.shape[1]
            k = k[0].repeat_interleave(group, dim=0)  # query head h reads KV head h // group
            dense = (q[0] @ k.transpose(-1, -2)) * attn.scaling  # (heads, T, T)
            per_kv = dense[:, prompt_length:, :prompt_length].reshape(-1, group, len(ids) - prompt_length,
                                                                      prompt_length)
            out.append(per_kv.amax(dim=(1, 2)))
    return torch.stack(out)


@pytest.mark.parametrize("family", ["llama", "mistral"])  # with and without GQA
def test_labels_equal_dense_brute_force(family, monkeypatch):
    monkeypatch.setattr(labels_module, "KEY_BLOCK", 7)  # force several blocks on both axes
    monkeypatch.setattr(labels_module, "QUERY_BLOCK", 3)
    model = tiny_model(family)
    ids = torch.randint(2, 300, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    got = compute_labels(model, ids[:31], ids[31:])
    assert got.shape == (2, model.config.num_key_value_heads, 31)
    torch.testing.assert_close(got, brute_force_labels(model, family, ids, 31), rtol=1e-5, atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # restored


def test_label_cache_computes_once(tmp_path, llama, monkeypatch):
    cache = LabelCache(tmp_path)
    first = cache.get(0, llama, [3, 4, 5, 6], [7, 8])
    monkeypatch.setattr(labels_module, "compute_labels", lambda *a: pytest.fail("recomputed"))
    torch.testing.assert_close(cache.get(0, llama, [3, 4, 5, 6], [7, 8]), first)
