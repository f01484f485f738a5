"""Forward hooks that hand each attention layer's pre-RoPE q, k and v to a callback.

The hooks sit on the model's own projection modules (q, k and v, or Phi-3's fused one), so no modeling code is
forked. They are registered in a context manager and always removed on exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import attention_layers, projections

# on_qkv(layer_idx, q (B, T, heads*head_dim), k (B, T, kv_heads*head_dim), v (B, T, kv_heads*head_dim))
QKVCallback = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]


def check_projections(model) -> list[nn.Module]:
    """The attention layers, refusing in one line an architecture whose attention has neither q/k/v_proj nor
    qkv_proj."""
    layers = attention_layers(model)
    for attention in layers:
        projections(attention)
    return layers


@contextmanager
def capture_qkv(model, on_qkv: QKVCallback) -> Iterator[None]:
    """Call `on_qkv` once per layer per forward pass with that layer's pre-RoPE projections.

    The three projections of a layer are held only until the last of them has run, so at most one layer's q, k
    and v are alive at once.
    """
    layers = attention_layers(model)  # `projections` below refuses an attention without them
    shape = ModelShape.from_config(model.config)
    handles = []
    pending: dict[int, dict[str, torch.Tensor]] = {}

    def collector(layer_idx: int, name: str):
        def hook(_module, _inputs, output):
            parts = pending.setdefault(layer_idx, {})
            parts[name] = output
            if len(parts) == 3:
                del pending[layer_idx]
                on_qkv(layer_idx, parts["q"], parts["k"], parts["v"])

        return hook

    def fused(layer_idx: int):
        sizes = [shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.kv_heads * shape.head_dim]

        def hook(_module, _inputs, output):
            q, k, v = output.split(sizes, dim=-1)
            on_qkv(layer_idx, q, k, v)

        return hook

    try:
        for layer_idx, attn in enumerate(layers):
            found = projections(attn)
            if len(found) == 1:
                handles.append(found[0].register_forward_hook(fused(layer_idx)))
            else:
                for name, proj in zip(("q", "k", "v"), found):
                    handles.append(proj.register_forward_hook(collector(layer_idx, name)))
        yield
    finally:
        for handle in handles:
            handle.remove()
        pending.clear()
