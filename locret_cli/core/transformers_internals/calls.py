"""What transformers passes to a forward, as hooks see it, and what it brings around the call: the keyword
arguments of a model's and a decoder layer's forward, its activation functions by name, and the GGUF reader's
progress bar.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformers.activations import ACT2FN

from locret_cli.errors import LocretError


def model_call_tokens(kwargs: dict) -> tuple[int, object]:
    """(tokens given, the cache or None) of a model forward's keyword arguments, whichever name the cache goes by."""
    return kwargs["input_ids"].shape[-1], kwargs.get("cache", kwargs.get("past_key_values"))


def layer_call_for(args: tuple, kwargs: dict, index: torch.Tensor) -> tuple[tuple, dict, dict]:
    """A decoder layer's forward arguments for the tokens at `index` (K,) of the chunk: (args, kwargs, shared), where
    `shared` holds the sliced rotary angles, position ids and attention mask that every layer above takes as well."""
    shared = {}
    if kwargs.get("position_embeddings") is not None:
        shared["position_embeddings"] = tuple(t.index_select(1, index) for t in kwargs["position_embeddings"])
    if kwargs.get("position_ids") is not None:
        shared["position_ids"] = kwargs["position_ids"].index_select(1, index)
    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor):  # (B, 1, T, n + T): the chunk's rows, and its columns past the cache's
        past = mask.shape[-1] - mask.shape[-2]
        columns = torch.cat([torch.arange(past, device=index.device), past + index])
        shared["attention_mask"] = mask.index_select(2, index).index_select(3, columns)
    elif mask is not None:
        raise LocretError("lazy prefill needs a tensor attention mask or none; this model's attention gives "
                          f"{type(mask).__name__}")
    if args:
        args = (args[0].index_select(1, index), *args[1:])
    else:
        kwargs = {**kwargs, "hidden_states": kwargs["hidden_states"].index_select(1, index)}
    return args, {**kwargs, **shared}, shared


def has_activation(name: str) -> bool:
    """Whether transformers has an activation function of this name (as configs name them: "silu", "gelu", ...)."""
    return name in ACT2FN


def activation_function(name: str) -> nn.Module:
    """transformers' activation module of this name."""
    return ACT2FN[name]


@contextmanager
def quiet_gguf_conversion() -> Iterator[None]:
    """transformers' GGUF reader draws a tqdm bar of its own, which `disable_progress_bar` does not reach; within the
    block it draws none. Restored on exit."""
    from transformers import modeling_gguf_pytorch_utils as reader

    bar = reader.tqdm
    reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        reader.tqdm = bar
