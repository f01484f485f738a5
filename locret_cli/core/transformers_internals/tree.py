"""Where a transformers model keeps its parts: the decoder layers, their attention and projections, the rotary
embedding, the Llama family's norms and MLP, and the names its checkpoints and linears go by.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from locret_cli.core.shape import FULL
from locret_cli.errors import LocretError

QKV = ("q_proj", "k_proj", "v_proj")
FUSED_QKV = "qkv_proj"  # Phi-3's one projection for q, k and v
# linears that read one input (their products can share one packed weight), and the linears a reader adapts
SIBLING_LINEARS = (QKV, ("gate_proj", "up_proj"))
ADAPTED_LINEARS = (*QKV, "o_proj", "gate_proj", "up_proj", "down_proj")


def attention_layers(model) -> list[nn.Module]:
    """The decoder's attention modules in layer order; each has a `layer_idx`."""
    found = {}
    for module in model.modules():
        layer_idx = getattr(module, "layer_idx", None)
        if layer_idx is not None and type(module).__name__.endswith("Attention"):
            found.setdefault(layer_idx, module)
    if not found:
        raise LocretError(f"{type(model).__name__} has no attention layers locret can hook")
    return [found[i] for i in sorted(found)]


def projections(attention: nn.Module) -> list[nn.Module]:
    """An attention module's q, k and v projections, or its one fused projection; refused in one line when it has
    neither."""
    if all(hasattr(attention, name) for name in QKV):
        return [getattr(attention, name) for name in QKV]
    if hasattr(attention, FUSED_QKV):
        return [getattr(attention, FUSED_QKV)]
    raise LocretError(f"{type(attention).__name__} has no q_proj/k_proj/v_proj (or fused qkv_proj) modules; "
                      "locret's retaining heads cannot read this architecture")


def decoder_layers(model) -> list[nn.Module]:
    """The decoder layers in order: the modules that hold each attention layer as `self_attn`."""
    attention = {id(attn): i for i, attn in enumerate(attention_layers(model))}
    found = {}
    for module in model.modules():
        index = attention.get(id(getattr(module, "self_attn", None)))
        if index is not None:
            found[index] = module
    if len(found) != len(attention):
        raise LocretError(f"{type(model).__name__}'s decoder layers do not each hold their attention as self_attn")
    return [found[i] for i in range(len(found))]


def residual_writers(layer: nn.Module) -> tuple[nn.Module, nn.Module]:
    """A decoder layer's attention output projection and MLP: what it adds to the residual stream."""
    return layer.self_attn.o_proj, layer.mlp


def rotary_module(model) -> nn.Module:
    """The model's shared rotary-embedding module (Gemma 3's holds one set of frequencies per kind of layer)."""
    for module in model.modules():
        frequencies = hasattr(module, "inv_freq") or hasattr(module, f"{FULL}_inv_freq")
        if frequencies and type(module).__name__.endswith("RotaryEmbedding"):
            return module
    raise LocretError(f"{type(model).__name__} has no rotary embedding module")


def decoder_functions(attention: nn.Module) -> tuple[Callable, Callable]:
    """(apply_rotary_pos_emb, eager_attention_forward) of the modeling file an attention module comes from."""
    modeling = sys.modules[type(attention).__module__]
    return modeling.apply_rotary_pos_emb, modeling.eager_attention_forward


def decoder_stack(model) -> nn.Module:
    """The decoder without its output layer: called with `input_ids`, it runs every layer and returns hidden
    states."""
    return model.get_decoder()


def sampled_weight_names(layers: int) -> list[str]:
    """Checkpoint names of the embeddings and three projections spread through the depth of a model of `layers`."""
    last, middle = layers - 1, layers // 2
    return ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            f"model.layers.{middle}.mlp.down_proj.weight", f"model.layers.{last}.self_attn.v_proj.weight"]


@dataclass(frozen=True)
class LlamaLayer:
    """One Llama-family decoder layer's modules, in the order its forward calls them: norm, attention (q, k, v, RoPE,
    o), residual, norm, MLP (gate and up, down), residual. `attention` is what an attention function is given;
    `head_dim` and `scaling` are its own."""

    input_norm: nn.Module
    attention: nn.Module
    q: nn.Module
    k: nn.Module
    v: nn.Module
    o: nn.Module
    post_norm: nn.Module
    mlp: nn.Module
    gate: nn.Module
    up: nn.Module
    down: nn.Module
    head_dim: int
    scaling: float


@dataclass(frozen=True)
class LlamaDecoder:
    """A Llama-family decoder's modules, and its modeling file's own RoPE and eager attention functions."""

    embed: nn.Module
    rotary: nn.Module
    layers: tuple[LlamaLayer, ...]
    norm: nn.Module
    head: nn.Module
    rotate: Callable
    eager: Callable


def llama_decoder(model) -> LlamaDecoder:
    """The modules of a model whose decoder layers are the plain Llama shape (`core/families.py`), read once."""
    decoder = decoder_stack(model)
    layers = tuple(
        LlamaLayer(layer.input_layernorm, layer.self_attn, layer.self_attn.q_proj, layer.self_attn.k_proj,
                   layer.self_attn.v_proj, layer.self_attn.o_proj, layer.post_attention_layernorm, layer.mlp,
                   layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj, layer.self_attn.head_dim,
                   layer.self_attn.scaling)
        for layer in decoder.layers[: model.config.num_hidden_layers]
    )
    rotate, eager = decoder_functions(layers[0].attention)
    return LlamaDecoder(decoder.embed_tokens, decoder.rotary_emb, layers, decoder.norm, model.lm_head, rotate, eager)


def weight_blocks(model) -> list[nn.Module]:
    """The units accelerate places whole: each decoder layer, the embeddings, the output layer."""
    blocks = [*decoder_layers(model), model.get_input_embeddings(), model.get_output_embeddings()]
    return [block for block in blocks if block is not None]


def decoder_parameters(model) -> int:
    """Parameters of the decoder layers (neither the embeddings nor the output layer)."""
    return sum(p.numel() for layer in decoder_layers(model) for p in layer.parameters())


def untie(model) -> None:
    """Keep transformers from tying the output layer back to the embeddings (once it holds weights of its own)."""
    model.config.tie_word_embeddings = False
