"""One decode step of locret's own for the families whose decoder layers are the plain Llama shape
(`core/families.py`), over the engine's cache.

transformers' forward for one token spends more time on its glue than on its arithmetic at this size: keyword
plumbing and deprecation wrappers at every layer, output records, a mask builder that returns nothing. This step
calls the model's own modules (embedding, norms, projections, MLPs, the rotary embedding and the head) in the order
`LlamaDecoderLayer` calls them, so every product, hook (the reader's updates) and quantized linear is the model's,
and attends through the attention implementation in force (`cache_attention`, or an observer's), so it gives the
same logits, bit for bit (tests/test_decode_step.py). Only the glue between the modules is this file's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.families import has_plain_llama_layers
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import attention_in_force, llama_decoder

_counters: list[Callable[[int], None]] = []  # each hears the entries cached before every step (`counting_steps`)


@contextmanager
def counting_steps(counter: Callable[[int], None]) -> Iterator[None]:
    """Within the block, `counter` hears each step's count of entries cached before it (a FLOP counter: the step
    does not go through the model's forward, whose hooks count the rest)."""
    _counters.append(counter)
    try:
        yield
    finally:
        _counters.remove(counter)


def count_step(cache: LocretCache) -> None:
    """Tell each counter of `counting_steps` in force that a step over `cache` begins."""
    for counter in _counters:
        counter(cache.get_seq_length())


class DecodeStep:
    """Logits (1, 1, vocab) of one token at one position, appended to the cache, for a model `fits`."""

    def __init__(self, model):
        self.config, self.decoder = model.config, llama_decoder(model)

    @staticmethod
    def fits(model) -> bool:
        """Whether the model is one whose decoder layers this step computes exactly as transformers does."""
        return has_plain_llama_layers(model.config.model_type) and not any(layer_windows(model.config))

    def __call__(self, token_id: torch.Tensor, position: torch.Tensor, cache: LocretCache) -> torch.Tensor:
        """token_id and position (1, 1); the cache's next entries are already staged."""
        count_step(cache)
        decoder = self.decoder
        hidden = decoder.embed(token_id)
        cos, sin = decoder.rotary(hidden, position_ids=position)
        attend = attention_in_force(self.config, decoder.eager)
        for layer, cached in zip(decoder.layers, cache.layers):
            shape = (1, 1, -1, layer.head_dim)
            x = layer.input_norm(hidden)
            query = layer.q(x).view(shape).transpose(1, 2)
            key = layer.k(x).view(shape).transpose(1, 2)
            value = layer.v(x).view(shape).transpose(1, 2)
            query, key = decoder.rotate(query, key, cos, sin)
            keys, values = cached.update(key, value)
            out, _ = attend(layer.attention, query, keys, values, None, dropout=0.0, scaling=layer.scaling)
            hidden = hidden + layer.o(out.reshape(1, 1, -1).contiguous())
            hidden = hidden + layer.mlp(layer.post_norm(hidden))
        return decoder.head(decoder.norm(hidden))
