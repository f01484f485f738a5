"""A decode step compiled whole by inductor, as gpt-fast compiles its decoder, for the families whose decoder layers
are the plain Llama shape (`core/families.py`), on the CPU (`--compile-decode`).

The own step (`decode_step.py`) runs the model's modules eagerly: about 1,500 small ops a step for SmolLM2-135M,
each paying the dispatcher, which on a small CPU costs about as much as the linears (docs/measurements/decode.md,
docs/measurements/cpus.md). This step is one function of the model's weights, traced once into one graph: the
model's own norms and rotary embedding, the projections that read one input as one product, the MLP, the head;
inductor's freezing folds the weights in, packed for oneDNN. The cache stays locret's: the step writes the new entry
into the layer's preallocated buffers at a slot given as a tensor, the buffers' length symbolic (so nothing
recompiles from one step or one answer to the next), and attends over the filled slots through `cache_attention`,
the attention the own step uses, called as one opaque op. An observer in force (citations' tally) hears every
layer's query and keys, as it would from the model's attention.

It answers for what the own step fits and the graph holds: a CPU, no forward hooks on the model's modules (a reader
in force), an unquantized cache and a rotary embedding whose frequencies do not change with length. Otherwise the
own step answers. Compiling takes tens of seconds and some memory once per process (`docs/measurements/decode.md`);
the step pays for itself only over long answers or many questions.
"""

from __future__ import annotations

import shutil

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.answer.decode_step import DecodeStep, count_step
from locret_cli.core.attention.over_cache import cache_attention
from locret_cli.core.attention.probe import observer_in_force
from locret_cli.core.attention.rope import LENGTH_DEPENDENT_ROPE_TYPES
from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.transformers_internals import LlamaDecoder

ATTRIBUTE = "locret_compiled_step"  # the model's compiled step, once `compile_decode` gave it one


def attend_filled(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, filled: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """`cache_attention` of query (1, heads, 1, D) over the first `filled` slots of a layer's key and value buffers
    (1, kv_heads, capacity, D): (1, 1, heads * D)."""
    entries = int(filled)
    out = cache_attention(query, keys[:, :, :entries], values[:, :, :entries], scale)
    return out.transpose(1, 2).reshape(1, 1, -1).clone()


# registered as a plain operator (a CPU kernel and a shape function), which costs less per call than
# `torch.library.custom_op`'s wrapper: the graph calls it once per layer and step
_LIBRARY = torch.library.Library("locret", "FRAGMENT")
_LIBRARY.define("attend_filled(Tensor query, Tensor keys, Tensor values, Tensor filled, float scale) -> Tensor")
_LIBRARY.impl("attend_filled", attend_filled, "CPU")
_LIBRARY.impl("attend_filled", lambda query, keys, values, filled, scale: query.new_empty(
    1, 1, query.shape[1] * query.shape[3]), "Meta")


def cpp_compiler() -> str | None:
    """The C++ compiler inductor's CPU backend builds its kernels with, or None."""
    return shutil.which("c++") or shutil.which("g++")


def linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A plain `nn.Linear`'s product (its weight, in the activations' dtype, not a packed or widening forward the
    engine gave it), else the module's own."""
    return F.linear(x, module.weight.to(x.dtype), module.bias) if type(module) is nn.Linear else module(x)


def int8_rows(module: nn.Module) -> bool:
    """Whether `module` holds int8 weights with one scale per output row (`runtime/int8_linear.py`)."""
    weight = getattr(module, "weight", None)
    return weight is not None and weight.dtype == torch.int8 and hasattr(module, "weight_scale")


def joint_linear(modules: list[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    """The outputs of linears that read `x`: one product where all are plain `nn.Linear` alike in bias, or all int8
    weights with a scale per row (`--load-8bit`'s) and no bias (inductor folds the joined weights into constants),
    else each module's own."""
    if all(type(m) is nn.Linear for m in modules) and len({m.bias is None for m in modules}) == 1:
        bias = None if modules[0].bias is None else torch.cat([m.bias for m in modules])
        out = F.linear(x, torch.cat([m.weight for m in modules]).to(x.dtype), bias)
    elif all(int8_rows(m) and m.bias is None for m in modules):
        weight, scale = torch.cat([m.weight for m in modules]), torch.cat([m.weight_scale for m in modules])
        out = torch.ops.locret.int8_rows(x.reshape(1, -1), weight, scale).view(*x.shape[:-1], -1)
    else:
        return [linear(m, x) for m in modules]
    return list(out.split([m.out_features for m in modules], -1))


class StaticDecoder(nn.Module):
    """(logits (1, 1, vocab), queries (layers, 1, heads, 1, D)) of one token written at each layer's `slots`
    entry."""

    def __init__(self, model, decoder: LlamaDecoder):
        super().__init__()
        self.model = model  # its weights are this module's, for inductor's freezing
        self.decoder = decoder
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

    def forward(self, token: torch.Tensor, position: torch.Tensor, origin: torch.Tensor, slots: torch.Tensor,
                buffers: list[list[torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        decoder = self.decoder
        hidden = decoder.embed(token)
        cos, sin = decoder.rotary(hidden, position_ids=position)
        queries = []
        for index, (layer, (keys, values, scores, positions, origins)) in enumerate(zip(decoder.layers, buffers)):
            slot = slots[index:index + 1]
            x = layer.input_norm(hidden)
            q, k, v = joint_linear([layer.q, layer.k, layer.v], x)
            q = q.view(1, 1, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(1, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(1, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = decoder.rotate(q, k, cos, sin)
            keys.index_copy_(2, slot, k)
            values.index_copy_(2, slot, v)
            scores.index_fill_(2, slot, 0.0)
            positions.index_copy_(2, slot, position.to(positions.dtype).view(1, 1, 1).expand(1, self.kv_heads, 1))
            origins.index_copy_(2, slot, origin.to(origins.dtype).view(1, 1, 1).expand(1, self.kv_heads, 1))
            queries.append(q)
            out = torch.ops.locret.attend_filled(q.contiguous(), keys, values, slot[0] + 1, layer.scaling)
            hidden = hidden + linear(layer.o, out)
            x = layer.post_norm(hidden)
            gate, up = joint_linear([layer.gate, layer.up], x)
            hidden = hidden + linear(layer.down, F.silu(gate) * up)
        return linear(decoder.head, decoder.norm(hidden)), torch.stack(queries)


class CompiledStep:
    """`DecodeStep`'s contract (logits of one token, appended to the cache) through the compiled `StaticDecoder`,
    or through the own step where the graph does not hold the case (see the module docstring)."""

    def __init__(self, model):
        import torch._dynamo  # imported here: torch.compile's machinery takes seconds to import
        from torch._inductor import config

        self.model, self.own = model, DecodeStep(model)
        self.mark_dynamic, self.inductor = torch._dynamo.mark_dynamic, config
        self.compiled = torch.compile(StaticDecoder(model, self.own.decoder), fullgraph=True)
        self.traced = False
        self.modules = list(model.modules())
        self.attentions = [layer.attention for layer in self.own.decoder.layers]

    @staticmethod
    def fits(model) -> bool:
        rope = (getattr(model.config, "rope_parameters", None) or {}).get("rope_type", "default")
        return DecodeStep.fits(model) and model.device.type == "cpu" and rope not in LENGTH_DEPENDENT_ROPE_TYPES

    def __call__(self, token_id: torch.Tensor, position: torch.Tensor, cache: LocretCache) -> torch.Tensor:
        if cache.kv_bits != 16 or torch.is_grad_enabled() or any(m._forward_hooks or m._forward_pre_hooks
                                                            for m in self.modules):
            return self.own(token_id, position, cache)
        count_step(cache)
        cache.own_tails(1)
        layers = cache.layers
        buffers = [[layer.buffers.tensors[name] for name in ("keys", "values", "scores", "positions", "origins")]
                   for layer in layers]
        slots = torch.tensor([layer.length for layer in layers])
        if not self.traced:  # one graph for buffers of every capacity: no second compile for the next answer
            for tensor in (t for layer_buffers in buffers for t in layer_buffers):
                self.mark_dynamic(tensor, 2)
            self.traced = True
        # the weights folded in as constants, packed for oneDNN
        with self.inductor.patch(freezing=True):
            logits, queries = self.compiled(token_id, position, layers[0].staged_origins, slots, buffers)
        for layer in layers:
            layer.length += 1
        observer = observer_in_force()
        if observer is not None:
            for index, (layer, attention) in enumerate(zip(layers, self.attentions)):
                observer(index, queries[index], layer.keys, attention.scaling)
        return logits


def compile_decode(model) -> bool:
    """Give `model` a compiled decode step (the engine takes it in place of the own step); False, and nothing
    changed, where `CompiledStep.fits` does not hold."""
    if not CompiledStep.fits(model):
        return False
    setattr(model, ATTRIBUTE, CompiledStep(model))
    return True


def decode_step_for(model) -> DecodeStep | CompiledStep | None:
    """The step the engine decodes with: the compiled one `compile_decode` gave the model, else the own step where it
    fits, else None (the model's forward)."""
    return getattr(model, ATTRIBUTE, None) or (DecodeStep(model) if DecodeStep.fits(model) else None)
