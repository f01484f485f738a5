"""The one seam onto transformers' internals (`core/transformers_internals`): nothing outside it names a model's
submodules, a forward's keyword arguments or a module of transformers, and what it hands out is the model's own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.models import tiny_model

from locret_cli.core import transformers_internals as seam
from locret_cli.errors import LocretError

PACKAGE = Path(__file__).resolve().parents[1] / "locret_cli"
SEAM = PACKAGE / "core" / "transformers_internals"
# names transformers gives a model's submodules (`model.model` and `model.model.layers` are checked as chains: a
# model's `layers` or `model` alone may be locret's own, as a cache's layers or a spec's model)
SUBMODULES = {"self_attn", "rotary_emb", "embed_tokens", "lm_head", "q_proj", "k_proj", "v_proj", "o_proj",
              "qkv_proj", "gate_proj", "up_proj", "down_proj", "input_layernorm", "post_attention_layernorm",
              "_attn_implementation"}
FORWARD_KEYWORDS = {"past_key_values", "position_embeddings", "hidden_states", "cache_position"}


def outside_seam() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if SEAM not in path.parents]


def reaches(path: Path) -> list[str]:
    """Where a file reaches into transformers: a submodule attribute of a model, a forward's keyword by name, an
    import from a module of transformers (its top-level public names are fine)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and (node.attr in SUBMODULES or _decoder_chain(node)):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in FORWARD_KEYWORDS:
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers."):
            found.append(f"{path.name}:{node.lineno} from {node.module}")
    return found


def _decoder_chain(node: ast.Attribute) -> bool:
    """`model.model` (the decoder inside a causal LM), or `….model.layers` (its decoder layers)."""
    inner = node.value
    if node.attr == "model":
        return isinstance(inner, ast.Name) and inner.id == "model"
    return node.attr == "layers" and isinstance(inner, ast.Attribute) and inner.attr == "model"


def test_nothing_outside_the_seam_reaches_into_transformers():
    assert [reach for path in outside_seam() for reach in reaches(path)] == []


def test_the_scan_finds_a_reach(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from transformers.activations import ACT2FN\n"
                       "def f(model, kwargs):\n"
                       "    return model.model.layers[0].self_attn.q_proj, kwargs['past_key_values']\n")
    assert sorted(reaches(planted)) == ["planted.py:1 from transformers.activations", "planted.py:3 'past_key_values'",
                                        "planted.py:3 .layers", "planted.py:3 .model", "planted.py:3 .q_proj",
                                        "planted.py:3 .self_attn"]


def test_llama_decoder_hands_out_the_models_own_modules():
    model = tiny_model("llama")
    decoder = seam.llama_decoder(model)
    assert decoder.embed is model.model.embed_tokens and decoder.head is model.lm_head
    assert decoder.rotary is model.model.rotary_emb and decoder.norm is model.model.norm
    assert len(decoder.layers) == model.config.num_hidden_layers
    for layer, own in zip(decoder.layers, model.model.layers):
        assert (layer.q, layer.k, layer.v, layer.o) == (own.self_attn.q_proj, own.self_attn.k_proj,
                                                         own.self_attn.v_proj, own.self_attn.o_proj)
        assert (layer.gate, layer.up, layer.down) == (own.mlp.gate_proj, own.mlp.up_proj, own.mlp.down_proj)
        assert (layer.head_dim, layer.scaling) == (own.self_attn.head_dim, own.self_attn.scaling)


@pytest.mark.parametrize("family", ["llama", "phi3", "gemma3"])
def test_layers_projections_and_rotary_of_each_family(family):
    model = tiny_model(family)
    layers = seam.decoder_layers(model)
    assert [layer.self_attn for layer in layers] == seam.attention_layers(model)
    fused = family == "phi3"
    assert [len(seam.projections(attention)) for attention in seam.attention_layers(model)] == \
        [1 if fused else 3] * len(layers)
    assert seam.rotary_module(model) is model.model.rotary_emb
    assert seam.decoder_parameters(model) == sum(p.numel() for p in model.model.layers.parameters())
    assert seam.weight_blocks(model)[: len(layers)] == layers


def test_projections_refuse_an_attention_without_them():
    model = tiny_model("llama")
    del model.model.layers[0].self_attn.k_proj
    with pytest.raises(LocretError, match="no q_proj/k_proj/v_proj"):
        seam.projections(model.model.layers[0].self_attn)


def test_a_layer_call_cut_to_some_tokens():
    hidden, cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    mask = torch.arange(7 * 5.0).view(1, 1, 5, 7)  # 2 cached entries, then the chunk's 5
    index = torch.tensor([1, 4])
    kwargs = {"position_embeddings": (cos, sin), "position_ids": torch.arange(5).view(1, 5), "attention_mask": mask}
    args, cut, shared = seam.layer_call_for((hidden,), kwargs, index)
    assert torch.equal(args[0], hidden[:, [1, 4]])
    assert torch.equal(shared["position_ids"], torch.tensor([[1, 4]]))
    assert torch.equal(shared["position_embeddings"][0], cos[:, [1, 4]])
    assert torch.equal(shared["attention_mask"], mask[:, :, [1, 4]][..., [0, 1, 3, 6]])
    assert cut == {**kwargs, **shared}
    _, by_name, _ = seam.layer_call_for((), {"hidden_states": hidden}, index)
    assert torch.equal(by_name["hidden_states"], hidden[:, [1, 4]])
    with pytest.raises(LocretError, match="tensor attention mask"):
        seam.layer_call_for((hidden,), {"attention_mask": object()}, index)


def test_a_model_call_names_its_cache_either_way():
    ids = torch.zeros(1, 3, dtype=torch.long)
    assert seam.model_call_tokens({"input_ids": ids, "cache": "new"}) == (3, "new")
    assert seam.model_call_tokens({"input_ids": ids, "past_key_values": "old"}) == (3, "old")
    assert seam.model_call_tokens({"input_ids": ids}) == (3, None)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'q_proj'"):
        seam.q_proj  # noqa: B018


def test_the_checks_before_loading_do_not_import_transformers_modeling_code():
    code = ("import sys, locret_cli.models.preflight; "
            "print('transformers.modeling_utils' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
