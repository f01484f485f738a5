"""Seeing each layer's real query and key inside the model's attention call.

A registered attention implementation hands (layer_idx, query, key, scaling) to the observer in force, then attends
as the model would have: SDPA with transformers' mask or, where the engine attends over its cache without a mask
(`over_cache.py`), by that attention, through a twin implementation; observing changes no attention call.
query (B, heads, T, D) and key (B, kv_heads, n, D) are exactly what the model attends with: after any q/k norm and
RoPE, with key covering the whole cache. Labels for training and attention-based eviction scores
are both computed from here, so neither re-implements a model's attention.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from locret_cli.core.attention import over_cache as cache_attention
from locret_cli.core.transformers_internals import (
    attention_implementation,
    implementation_of,
    register_attention,
    sdpa_attention_forward,
)

IMPLEMENTATION = "locret_probe"  # observe, then SDPA with the model's mask
MASK_FREE = "locret_probe_cache"  # observe, then attend over the cache without a mask

# observer(layer_idx, query (B, heads, T, D), key (B, kv_heads, n, D), scaling)
Observer = Callable[[int, torch.Tensor, torch.Tensor, float], None]
_observers: list[Observer] = []


def observer_in_force() -> Observer | None:
    """The observer that hears attention calls now (the innermost `observe_attention`), or None."""
    return _observers[-1] if _observers else None


def _observe(module, query: torch.Tensor, key: torch.Tensor, scaling: float | None) -> None:
    if _observers:
        _observers[-1](module.layer_idx, query, key, scaling if scaling is not None else query.shape[-1] ** -0.5)


def _attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    _observe(module, query, key, scaling)
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _mask_free_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    _observe(module, query, key, scaling)
    return cache_attention.attention(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


register_attention(IMPLEMENTATION, _attention, masks_like="sdpa")
register_attention(MASK_FREE, _mask_free_attention)
cache_attention.register_twin(IMPLEMENTATION, MASK_FREE)


@contextmanager
def observe_attention(model, observer: Observer) -> Iterator[None]:
    """Within the block, every attention call of `model` reports to `observer`, and attends as it did (with the
    mask, or over the cache without one); the model's own attention implementation is restored on exit."""
    name = MASK_FREE if cache_attention.is_mask_free(implementation_of(model)) else IMPLEMENTATION
    _observers.append(observer)
    try:
        with attention_implementation(model, name):
            yield
    finally:
        _observers.pop()
