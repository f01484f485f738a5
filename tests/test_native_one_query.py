"""locret's fp32 one-query attention kernel (`runtime/native_one_query.py`): the attention over every entry up to
fp32 rounding, handed only fp32 decode steps once installed, refused where it cannot be built, and a model's answer
unchanged."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import masked
from helpers.engines import greedy_answer
from helpers.models import tiny_model

from locret_cli.core.attention.over_cache import cache_attention, use_attention_kernel
from locret_cli.core.heads import RetainingHeads
from locret_cli.runtime import native_one_query
from locret_cli.runtime.native_one_query import built_kernel, chosen_kernel

KERNEL = built_kernel()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="this CPU lacks AVX2 and FMA, or no C compiler built it")


def a_step(heads: int, kv_heads: int, entries: int, dim: int, seed: int, dtype=torch.float32):
    """A query (1, heads, 1, D) transposed from (1, 1, heads, D), and key and value views of larger buffers, as a
    decode step hands them over."""
    generator = torch.Generator().manual_seed(seed)
    query = 2 * torch.randn(1, 1, heads, dim, generator=generator).transpose(1, 2)
    key, value = (2 * torch.randn(1, kv_heads, entries + 20, dim, generator=generator) for _ in range(2))
    return query.to(dtype), key[:, :, :entries].to(dtype), value[:, :, :entries].to(dtype)


@needs_kernel
@pytest.mark.parametrize("heads, kv_heads, entries, dim", [
    (9, 3, 4096, 64), (9, 3, 1, 64), (9, 3, 7, 64), (14, 2, 4353, 64), (12, 2, 1537, 128), (12, 2, 512, 128),
    (12, 2, 513, 128), (16, 1, 600, 256), (4, 4, 33, 16), (7, 1, 1030, 32)])
def test_it_is_the_attention_over_every_entry_up_to_fp32_rounding(heads, kv_heads, entries, dim):
    query, key, value = a_step(heads, kv_heads, entries, dim, seed=entries + dim)
    exact = masked(query.double(), key.double(), value.double())
    got = KERNEL.attend(query, key, value, dim ** -0.5)
    assert got.shape == (1, heads, 1, dim) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=2e-5)


@needs_kernel
def test_its_bound_would_catch_a_dropped_split_or_a_swapped_head():
    """Leaving out one run of 512 entries, or answering one head with its neighbour's output, errs far beyond the
    tolerance above."""
    query, key, value = a_step(12, 2, 1537, 128, seed=1)
    exact = masked(query.double(), key.double(), value.double())
    short = masked(query.double(), key[:, :, :1024].double(), value[:, :, :1024].double())
    assert float((short - exact).abs().max()) > 1e-2
    assert float((exact.roll(1, dims=1) - exact).abs().max()) > 1e-2


@needs_kernel
def test_it_takes_only_one_fp32_query_with_a_head_size_and_group_it_handles():
    assert KERNEL.fits(*a_step(9, 3, 10, 64, seed=0))
    assert not KERNEL.fits(*a_step(9, 3, 10, 64, seed=0, dtype=torch.bfloat16))
    assert not KERNEL.fits(*a_step(9, 3, 10, 40, seed=0))  # not a multiple of 16
    assert not KERNEL.fits(*a_step(9, 3, 10, 272, seed=0))  # above 256
    assert not KERNEL.fits(*a_step(34, 2, 10, 64, seed=0))  # 17 heads a KV head
    query, key, value = a_step(9, 3, 10, 64, seed=0)
    assert not KERNEL.fits(torch.cat([query, query], 2), key, value)  # a chunk: torch's


@needs_kernel
def test_installed_it_takes_decode_steps_but_not_chunks_nor_gradients(monkeypatch):
    calls = []
    monkeypatch.setattr(KERNEL, "attend", lambda *args, real=KERNEL.attend: calls.append(1) or real(*args))
    previous = use_attention_kernel(torch.float32, KERNEL)
    try:
        query, key, value = a_step(9, 3, 100, 64, seed=2)
        cache_attention(query, key, value, 0.125)
        assert calls == [1]
        chunk = torch.randn(1, 9, 4, 64)
        cache_attention(chunk, key, value, 0.125)
        query.requires_grad_(True)
        cache_attention(query, key, value, 0.125)
        assert calls == [1]
    finally:
        use_attention_kernel(torch.float32, previous)


def test_it_is_not_built_where_it_is_turned_off_or_no_compiler_builds_it(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    built_kernel.cache_clear(), chosen_kernel.cache_clear()
    try:
        assert built_kernel() is None
        monkeypatch.setenv("LOCRET_NATIVE_ATTENTION", "0")
        monkeypatch.delenv("CC")
        built_kernel.cache_clear(), chosen_kernel.cache_clear()
        assert built_kernel() is None and native_one_query.install() is None
    finally:
        built_kernel.cache_clear(), chosen_kernel.cache_clear()
        use_attention_kernel(torch.float32, None)


@needs_kernel
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_a_model_decodes_as_it_does_with_torchs_kernel(family, monkeypatch):
    model = tiny_model(family)
    heads = RetainingHeads.for_model(model)
    previous = use_attention_kernel(torch.float32, None)
    try:
        torch.manual_seed(0)
        without = greedy_answer(model, heads)
        calls = []
        monkeypatch.setattr(KERNEL, "attend", lambda *args, real=KERNEL.attend: calls.append(1) or real(*args))
        use_attention_kernel(torch.float32, KERNEL)
        torch.manual_seed(0)
        with_kernel = greedy_answer(model, heads)
    finally:
        use_attention_kernel(torch.float32, previous)
    assert len(calls) >= model.config.num_hidden_layers  # every layer of at least one decode step
    assert with_kernel[0] == without[0]
