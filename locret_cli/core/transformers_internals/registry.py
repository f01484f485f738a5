"""transformers' cache and its attention implementations: what the engine's attention and cache plug into."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

__all__ = ["Cache", "CacheLayerMixin", "attention_implementation", "attention_in_force", "cache_kwargs",
           "implementation_of", "register_attention", "sdpa_attention_forward"]


def cache_kwargs(module: torch.nn.Module, cache: Cache) -> dict[str, Cache]:
    """The keyword argument that hands `cache` to `module`'s forward (a model or a decoder layer): `cache` where the
    forward takes it (transformers 5.24 on), else `past_key_values`. 5.24 still accepts the old name, but warns
    (FutureWarning) on stderr at the first forward of each process."""
    return {_cache_keyword(type(module)): cache}


@functools.cache
def _cache_keyword(module_class: type) -> str:
    return "cache" if "cache" in inspect.signature(module_class.forward).parameters else "past_key_values"


def register_attention(name: str, function: Callable, masks_like: str | None = None) -> None:
    """Register attention `function` (transformers' signature) as implementation `name`; with `masks_like`, the
    model builds the masks it builds for that implementation, else none."""
    AttentionInterface.register(name, function)
    if masks_like:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[masks_like])


def implementation_of(model) -> str:
    """The name of the attention implementation `model` runs now."""
    return model.config._attn_implementation


@contextmanager
def attention_implementation(model, name: str) -> Iterator[None]:
    """Within the block, `model` attends with the registered implementation `name`; its own is restored on exit."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def attention_in_force(config, eager: Callable) -> Callable:
    """The attention function a model of `config` calls now (`eager` when its implementation is transformers' eager
    one, which is not registered)."""
    return ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager)
