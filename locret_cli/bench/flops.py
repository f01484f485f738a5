"""The roofline: how many FLOPs a run needed, and how fast this machine multiplies matrices.

FLOPs are counted from what the engine actually ran, with a forward pre-hook on the model: for every call with n new
tokens on top of a cache of c entries,
    linear layers    2 · (decoder parameters) · n          (q/k/v/o projections and MLPs of every layer; in a
                                                            document's chunk, less the last layer's output
                                                            projection and MLP, `core/keys_only.py`)
    attention        4 · layers · heads · head_dim · n · (c + (n + 1) / 2)    (QKᵀ and AV, causal within the call)
    LM head          2 · hidden · vocab                      (the engine keeps the logits of the last position only)
Embeddings, norms, RoPE and the scoring heads are left out: they are small beside these.

Calls are split by phase. One-token calls are decoding, whose floor is memory, not arithmetic: each step reads every
weight and every cached key and value once, so its roofline is those bytes at the measured memory read rate
(`memory_rate`). Every other call is prefill (the document's chunks and the question), whose roofline is its FLOPs at
the measured matmul rate (`matmul_rate`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from locret_cli.core.answer.decode_step import counting_steps
from locret_cli.core.keys_only import in_force, skipped_parameters
from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import decoder_parameters, model_call_tokens


class FlopCounter:
    """Accumulates the forward FLOPs of every model call while `counting(model)` is active."""

    def __init__(self, model):
        config = model.config.get_text_config(decoder=True)
        self.shape = ModelShape.from_config(model.config)
        self.decoder_parameters = decoder_parameters(model)
        self.skipped_parameters = skipped_parameters(model)  # in a pass that only appends to the cache
        self.output_flops = 2 * config.hidden_size * config.vocab_size
        self.element_bytes = torch.finfo(model.dtype).bits // 8
        self.weight_bytes = (self.decoder_parameters + config.hidden_size * config.vocab_size) * self.element_bytes
        self.total = self.prefill_flops = self.decode_bytes = 0

    def add(self, new_tokens: int, cached_tokens: int, keys_only: bool = False) -> None:
        s = self.shape
        attention = 4 * s.layers * s.heads * s.head_dim * new_tokens * (cached_tokens + (new_tokens + 1) / 2)
        linear = self.decoder_parameters - (self.skipped_parameters if keys_only else 0)
        flops = int(2 * linear * new_tokens + attention + self.output_flops)
        self.total += flops
        if new_tokens == 1:
            self.decode_bytes += self.weight_bytes + 2 * s.layers * s.kv_heads * s.head_dim * cached_tokens * \
                self.element_bytes
        else:
            self.prefill_flops += flops


@contextmanager
def counting(model, counter: FlopCounter):
    """Count every forward of `model` into `counter`; the hook is removed on exit, whatever happens."""

    def before_forward(_module, _args, kwargs):
        tokens, cache = model_call_tokens(kwargs)
        counter.add(tokens, cache.get_seq_length() if cache is not None else 0, keys_only=in_force(model))

    handle = model.register_forward_pre_hook(before_forward, with_kwargs=True)
    try:
        with counting_steps(lambda cached: counter.add(1, cached)):  # locret's own decode step, past the hook
            yield counter
    finally:
        handle.remove()


def matmul_rate(device: torch.device, dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """Measured FLOP/s of a (size x size) @ (size x size) matmul in `dtype` on `device`, after two warm-up runs."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    for _ in range(2):
        a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def memory_rate(device: torch.device, megabytes: int = 256, repeats: int = 5) -> float:
    """Measured bytes/s of reading a `megabytes` float32 tensor once (a sum), after one warm-up run."""
    data = torch.ones(megabytes * 2**18, device=device)
    data.sum()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        data.sum()
    _sync(device)
    return data.numel() * 4 * repeats / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
