"""One decode step of locret's own for Llama-family decoders, over the engine's cache.

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
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import attention_in_force, decoder_functions

# model types whose decoder layer is: norm, attention (q/k/v/o projections, RoPE, no q/k norm), residual, norm,
# MLP, residual, with no sliding window
FAMILIES = ("llama", "mistral", "qwen2")
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
        config = model.config
        decoder = model.model
        self.config = config
        self.embed, self.rotary, self.norm, self.head = decoder.embed_tokens, decoder.rotary_emb, decoder.norm, \
            model.lm_head
        self.layers = list(decoder.layers[: config.num_hidden_layers])
        self.rotate, self.eager = decoder_functions(self.layers[0].self_attn)

    @staticmethod
    def fits(model) -> bool:
        """Whether the model is one whose decoder layers this step computes exactly as transformers does."""
        return model.config.model_type in FAMILIES and not any(layer_windows(model.config))

    def __call__(self, token_id: torch.Tensor, position: torch.Tensor, cache: LocretCache) -> torch.Tensor:
        """token_id and position (1, 1); the cache's next entries are already staged."""
        count_step(cache)
        hidden = self.embed(token_id)
        cos, sin = self.rotary(hidden, position_ids=position)
        attend = attention_in_force(self.config, self.eager)
        for layer, cached in zip(self.layers, cache.layers):
            attention = layer.self_attn
            shape = (1, 1, -1, attention.head_dim)
            x = layer.input_layernorm(hidden)
            query = attention.q_proj(x).view(shape).transpose(1, 2)
            key = attention.k_proj(x).view(shape).transpose(1, 2)
            value = attention.v_proj(x).view(shape).transpose(1, 2)
            query, key = self.rotate(query, key, cos, sin)
            keys, values = cached.update(key, value)
            out, _ = attend(attention, query, keys, values, None, dropout=0.0, scaling=attention.scaling)
            hidden = hidden + attention.o_proj(out.reshape(1, 1, -1).contiguous())
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return self.head(self.norm(hidden))
