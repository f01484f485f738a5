"""A read needs every layer's keys and values, and never the hidden states the last layer would hand on.

Inside `keys_and_values_only(model)` the last decoder layer still runs its norm, its q, k and v projections (which
the retaining heads score), RoPE, the cache append and attention (whose queries and keys observers see), but its
output projection and MLP add nothing to the residual stream: each returns zeros of the hidden width without
computing. The cache a forward leaves inside is the one a whole forward leaves, bit for bit; its final hidden states,
and so its logits, mean nothing. For Qwen2.5-1.5B the two are 43.6M of the decoder's 1.31G parameters: a read does
3.3% fewer linear products. The replaced forwards are instance attributes, put back on exit (where another wrapper,
such as `runtime/native_rows.py`'s, had set one, that one).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch

from locret_cli.core.transformers_internals import decoder_layers, residual_writers

_in_force: weakref.WeakSet = weakref.WeakSet()
_last_layers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its last decoder layer, found once


@contextmanager
def keys_and_values_only(model) -> Iterator[None]:
    """Within the block, `model`'s last decoder layer computes what its cache entries need and nothing after them
    (see the module docstring); its forwards are restored on exit, whatever happens."""
    writers = _last_layer_writers(model)
    hidden = model.config.get_text_config(decoder=True).hidden_size
    saved = [writer.__dict__.get("forward") for writer in writers]
    for writer in writers:
        writer.forward = partial(_nothing, hidden)
    _in_force.add(model)
    try:
        yield
    finally:
        _in_force.discard(model)
        for writer, forward in zip(writers, saved, strict=True):
            if forward is None:
                del writer.forward
            else:
                writer.forward = forward


def in_force(model) -> bool:
    """Whether `model` is inside `keys_and_values_only` now."""
    return model in _in_force


def skipped_parameters(model) -> int:
    """The parameters whose products a forward inside `keys_and_values_only` does not compute."""
    return sum(p.numel() for writer in _last_layer_writers(model) for p in writer.parameters())


def _last_layer_writers(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The last decoder layer's `residual_writers`, read from the layer each time (a quantized load replaces its
    linears), the layer found once per model (a search of every module, about 2 ms a chunk otherwise)."""
    if model not in _last_layers:
        _last_layers[model] = decoder_layers(model)[-1]
    return residual_writers(_last_layers[model])


def _nothing(hidden: int, x: torch.Tensor, *_args, **_kwargs) -> torch.Tensor:
    """Zeros shaped as a residual-stream addition for input `x`, without memory of their own."""
    return x.new_zeros(()).expand(*x.shape[:-1], hidden)

