"""Attention over locret's cache without a mask, on the CPU and on CUDA in half precision.

In locret's engine the queries of every forward are the cache's last T entries, and every entry before them is
visible to all of them. transformers builds a (T, n) boolean mask for that, and SDPA reads it and computes the
masked half of the chunk's own block. Here, instead:

- A chunk is split as flash-decoding splits a long cache:
    past:  query (B, kv_heads, group * T, D) against the n - T kept entries, no mask: the heads that share a KV head
           are stacked as more queries, so no key is copied;
    own:   query (B, heads, T, D) against the chunk's own T entries (repeated per head: T entries, not n), causal;
  each output is weighted by the share of the softmax mass its keys hold, exp(lse_part - lse_all), the log-sum-exps
  that the flash kernels return (`aten::_scaled_dot_product_flash_attention_for_cpu`, and on CUDA
  `aten::_scaled_dot_product_flash_attention`, which needs bf16 or fp16).
- One query (a decode step) is the past case with every entry visible: its heads stacked per KV head, one flash call
  in the model's dtype. SDPA of one query in bf16 runs several times slower, and casting the cache to fp32 copies
  every entry at every step (`benchmarks/kernel_microbench.py one-query`, docs/measurements/zen4.md). On CUDA, SDPA
  of one query with fewer KV heads than heads falls back to plain matrix products, whose shapes change at every
  step: the first answer over a read decoded several times slower than a second (docs/measurements/gpu.md).

- A sliding layer (`sliding_window` set) holds its entries contiguous, in order (`core/cache/bounded.py`), so each query sees
  itself and the window - 1 entries before it: `sliding_attention` drops the entries no query sees, a decode step
  then attends to the rest without a mask, and a chunk with a band mask of (T, window - 1 + T) at most.

- A kernel installed with `use_attention_kernel` for a dtype (`runtime/native_attention.py` for bf16,
  `runtime/native_one_query.py` for fp32, each where it ran faster than torch's) takes every forward in that dtype
  it `fits`: a chunk's causal part and kept entries in one call, or a decode step's query. Kernels of different
  dtypes stay installed side by side, so models computing in both can share a process. A kernel computes forwards
  only: one whose gradients are wanted (a reader's training step) goes to torch's kernels.

The result is the masked attention up to rounding (tests/test_cache_attention.py on the CPU;
`research/gpu/check_cache_attention.py` on CUDA). `use_cache_attention` selects this implementation for one forward
of a model that `applies_to` (the CPU, or CUDA in half precision), which the engine checks once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Protocol

import torch
import torch.nn.functional as F

from locret_cli.core.transformers_internals import attention_implementation, implementation_of, register_attention

IMPLEMENTATION = "locret_cache"
_twins = {"sdpa": IMPLEMENTATION}  # an implementation the model may run -> its twin that attends by `cache_attention`


class AttentionKernel(Protocol):
    def fits(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool: ...

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor: ...


_kernels: dict[torch.dtype, AttentionKernel] = {}  # the kernel installed for each dtype a query may have


def use_attention_kernel(dtype: torch.dtype, kernel: AttentionKernel | None) -> AttentionKernel | None:
    """Have `cache_attention` hand every forward in `dtype` that `kernel` fits to it (None: torch's kernels for that
    dtype); returns the kernel it replaces for `dtype`. Other dtypes' kernels stay."""
    previous = _kernels.pop(dtype, None)
    if kernel is not None:
        _kernels[dtype] = kernel
    return previous


@contextmanager
def torchs_attention() -> Iterator[None]:
    """Every forward inside goes to torch's kernels; the installed kernels are back after it."""
    installed = dict(_kernels)
    _kernels.clear()
    try:
        yield
    finally:
        _kernels.clear()
        _kernels.update(installed)


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool, scale: float):
    """(output (B, H, L, D), lse (B, H, L) float32) of attention without a mask, or causal."""
    if query.device.type == "cuda":
        return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, causal, scale=scale)[:2]
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, causal, scale=scale)


def cache_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """Attention of query (B, heads, T, D) over key, value (B, kv_heads, n, D), whose last T entries are the
    queries' own (causal among themselves) and whose first n - T every query sees; returns (B, heads, T, D)."""
    kernel = _kernels.get(query.dtype)
    if kernel is not None and not _wants_gradients(query, key, value) and kernel.fits(query, key, value):
        return kernel.attend(query, key, value, scale)
    return split_attention(query, key, value, scale)


def _wants_gradients(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """`cache_attention` by torch's flash kernels: a decode step's query in one call, a chunk's kept entries and its
    own merged."""
    batch, heads, length, dim = query.shape
    kv_heads, entries = key.shape[1], key.shape[2]
    past, group = entries - length, heads // kv_heads
    if past == 0:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scale, enable_gqa=group > 1)
    stacked = query.reshape(batch, kv_heads, group * length, dim)
    if length == 1:  # a decode step: every entry is visible, the query's own included
        return _flash(stacked, key, value, False, scale)[0].reshape(batch, heads, 1, dim)
    past_out, past_lse = _flash(stacked, key[:, :, :past], value[:, :, :past], False, scale)
    own_keys, own_values = (t[:, :, past:].repeat_interleave(group, dim=1) for t in (key, value))
    own_out, own_lse = _flash(query, own_keys, own_values, True, scale)
    past_out, past_lse = past_out.reshape(batch, heads, length, dim), past_lse.reshape(batch, heads, length)
    total = torch.logaddexp(past_lse, own_lse)
    merged = past_out * (past_lse - total).exp().unsqueeze(-1) + own_out * (own_lse - total).exp().unsqueeze(-1)
    return merged.to(query.dtype)


def sliding_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
                      window: int) -> torch.Tensor:
    """`cache_attention` for a sliding layer, whose entries are contiguous tokens in order: each query sees itself
    and the window - 1 entries before it."""
    batch, heads, length, dim = query.shape
    entries = key.shape[2]
    start = max(0, entries - length - window + 1)  # the first entry the first query sees
    key, value = key[:, :, start:], value[:, :, start:]
    if length == 1:
        return cache_attention(query, key, value, scale)
    rows = torch.arange(entries - length, entries, device=query.device).unsqueeze(1)
    columns = torch.arange(start, entries, device=query.device).unsqueeze(0)
    band = (columns <= rows) & (rows - columns < window)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=band, scale=scale,
                                          enable_gqa=heads > key.shape[1])


def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None, **kwargs):
    """transformers' attention signature. The model builds no mask for this implementation (it is not registered
    with the mask interface): `cache_attention` needs none, and `sliding_attention` builds its band."""
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if sliding_window:
        output = sliding_attention(query, key, value, scale, sliding_window)
    else:
        output = cache_attention(query, key, value, scale)
    return output.transpose(1, 2).contiguous(), None


register_attention(IMPLEMENTATION, attention)


def applies_to(model) -> bool:
    """Whether `cache_attention` can stand in for the model's SDPA: on the CPU, or on CUDA in bf16 or fp16 (the
    CUDA flash kernel's precisions)."""
    device = model.device.type
    return device == "cpu" or device == "cuda" and model.dtype in (torch.bfloat16, torch.float16)


def register_twin(name: str, twin: str) -> None:
    """Have `use_cache_attention` turn the model's implementation `name` into `twin`, registered as attending by
    `attention` (an observer's implementation does: `core/attention/probe.py`)."""
    _twins[name] = twin


def is_mask_free(name: str) -> bool:
    """Whether implementation `name` attends by `cache_attention` (this one, or a registered twin)."""
    return name in _twins.values()


def use_cache_attention(model):
    """A context in which `model` (batch 1, attending over a LocretCache, `applies_to` it) attends with
    `cache_attention` in place of SDPA: its implementation's twin (an observer still hears every call), or, where
    it has none, a context that changes nothing."""
    twin = _twins.get(implementation_of(model))
    return attention_implementation(model, twin) if twin else nullcontext()
