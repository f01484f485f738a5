"""locret's attention kernel (`runtime/native_attention.py`): the masked attention up to bf16 rounding, for chunks and
for one query, handed only what it fits once installed, refused where it cannot be built, and the embedded model's
answers unchanged."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.attention import masked
from helpers.documents import GATE, filler_lines

from locret_cli.api import load_session
from locret_cli.core.attention.over_cache import (
    cache_attention,
    split_attention,
    torchs_attention,
    use_attention_kernel,
)
from locret_cli.core.heads import compute_dtype
from locret_cli.runtime import native_attention
from locret_cli.runtime.native_attention import NativeKernel, built_kernel, chosen_kernel

KERNEL = built_kernel()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="this CPU lacks AVX-512 BF16, or no C compiler built it")


def as_transformers_gives(heads: int, kv_heads: int, length: int, kept: int, dim: int, seed: int):
    """bf16 query (1, heads, T, D) transposed from (1, T, heads, D), and key and value as views of larger buffers."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(1, length, heads, dim, generator=generator).transpose(1, 2)
    key, value = (2 * torch.randn(1, kv_heads, length + kept + 20, dim, generator=generator) for _ in range(2))
    return query.bfloat16(), key[:, :, :length + kept].bfloat16(), value[:, :, :length + kept].bfloat16()


@needs_kernel
@pytest.mark.parametrize("heads, kv_heads, length, kept, dim", [
    (9, 3, 64, 300, 64), (9, 3, 40, 0, 64), (4, 2, 100, 937, 64), (8, 8, 17, 64, 128), (4, 1, 33, 70, 256),
    (6, 2, 16, 1, 32), (9, 3, 130, 4096, 64), (9, 3, 1, 4096, 64), (9, 3, 1, 1100, 64), (4, 1, 1, 20, 256),
    (16, 1, 1, 513, 32), (12, 2, 1, 1537, 128), (14, 2, 1, 4353, 64)])
def test_it_is_the_masked_attention_up_to_bf16_rounding(heads, kv_heads, length, kept, dim):
    query, key, value = as_transformers_gives(heads, kv_heads, length, kept, dim, seed=length + kept)
    scale = dim ** -0.5
    exact = masked(query.float(), key.float(), value.float())  # its scale is dim ** -0.5 too
    out = KERNEL.attend(query, key, value, scale)
    assert out.shape == (1, heads, length, dim) and out.dtype == torch.bfloat16
    error, torch_error = ((x.float() - exact).abs().max() for x in (out, split_attention(query, key, value, scale)))
    assert error <= torch_error + 2 ** -7, (error, torch_error)  # no worse than torch's kernels, within rounding
    assert error < 2 ** -5


class Recording:
    """An attention kernel that records the query lengths it was handed and computes them by torch's kernels."""

    def __init__(self, fits: bool = True):
        self.fitting, self.calls = fits, []

    def fits(self, query, key, value) -> bool:
        return self.fitting

    def attend(self, query, key, value, scale):
        self.calls.append(query.shape[2])
        return split_attention(query, key, value, scale)


@pytest.mark.parametrize("length, fits, handed", [(16, True, [16]), (1, True, [1]), (40, False, [])])
def test_an_installed_kernel_gets_what_it_fits(length, fits, handed):
    query, key, value = (torch.randn(1, h, n, 64) for h, n in ((9, length), (3, length + 50), (3, length + 50)))
    kernel = Recording(fits)
    previous = use_attention_kernel(torch.float32, kernel)
    try:
        out = cache_attention(query, key, value, 0.125)
    finally:
        use_attention_kernel(torch.float32, previous)
    assert kernel.calls == handed
    assert torch.allclose(out, masked(query, key, value), atol=1e-5)


def test_kernels_of_two_dtypes_stay_installed_side_by_side():
    """A bf16 model's kernel and an fp32 model's share a process: installing one keeps the other, each gets only
    forwards in its own dtype, and inside `torchs_attention` neither gets any."""
    query, key, value = (torch.randn(1, h, n, 64) for h, n in ((9, 16), (3, 66), (3, 66)))
    half, full = Recording(), Recording()
    before = (use_attention_kernel(torch.bfloat16, half), use_attention_kernel(torch.float32, full))
    try:
        cache_attention(query, key, value, 0.125)
        cache_attention(*(t.bfloat16() for t in (query, key, value)), 0.125)
        cache_attention(query[:, :, :1], key, value, 0.125)
        with torchs_attention():
            cache_attention(query, key, value, 0.125)
            cache_attention(*(t.bfloat16() for t in (query, key, value)), 0.125)
        cache_attention(query.half(), key.half(), value.half(), 0.125)  # no kernel for fp16
        assert half.calls == [16] and full.calls == [16, 1]
        assert use_attention_kernel(torch.float32, None) is full
        cache_attention(*(t.bfloat16() for t in (query, key, value)), 0.125)
        assert half.calls == [16, 16] and full.calls == [16, 1]
    finally:
        use_attention_kernel(torch.bfloat16, before[0]), use_attention_kernel(torch.float32, before[1])


@pytest.mark.parametrize("gradients, handed", [(True, []), (False, [16])])
def test_a_forward_whose_gradients_are_wanted_goes_to_torchs_kernels(gradients, handed):
    """The kernel computes forwards only: a reader's training step must reach the queries, keys and values."""
    query, key, value = (torch.randn(1, h, n, 64, requires_grad=True) for h, n in ((9, 16), (3, 66), (3, 66)))
    kernel = Recording()
    previous = use_attention_kernel(torch.float32, kernel)
    try:
        with torch.set_grad_enabled(gradients):
            out = cache_attention(query, key, value, 0.125)
    finally:
        use_attention_kernel(torch.float32, previous)
    assert kernel.calls == handed
    assert out.requires_grad == gradients
    if gradients:
        out.sum().backward()
        assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (query, key, value))


def test_it_is_not_built_where_it_is_turned_off_or_no_compiler_builds_it(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    assert native_attention.build() is None
    monkeypatch.setenv("LOCRET_NATIVE_ATTENTION", "0")
    built_kernel.cache_clear(), chosen_kernel.cache_clear()
    try:
        assert built_kernel() is None and native_attention.install() is None
    finally:
        built_kernel.cache_clear(), chosen_kernel.cache_clear()


@needs_kernel
def test_it_takes_only_bf16_on_the_cpu_with_a_head_size_and_a_length_it_handles():
    query, key, value = as_transformers_gives(9, 3, 32, 10, 64, seed=0)
    assert KERNEL.fits(query, key, value)
    assert not KERNEL.fits(query.float(), key.float(), value.float())
    assert not KERNEL.fits(*as_transformers_gives(9, 3, 32, 10, 48, seed=0))  # not a multiple of 32
    assert not KERNEL.fits(*as_transformers_gives(8, 3, 32, 10, 64, seed=0))  # heads not whole groups
    assert not KERNEL.fits(*as_transformers_gives(9, 3, 15, 10, 64, seed=0))  # a short chunk: torch's
    assert KERNEL.fits(*as_transformers_gives(9, 3, 1, 10, 64, seed=0))  # one query
    chunks_only = NativeKernel(KERNEL.library, KERNEL.build, frozenset({"chunks"}))  # where the probe said so
    assert chunks_only.fits(query, key, value) and not chunks_only.fits(*as_transformers_gives(9, 3, 1, 10, 64, 0))


@needs_kernel
def test_the_embedded_model_reads_and_answers_as_with_torchs_kernels(monkeypatch, tmp_path):
    session = load_session(device="cpu")
    if compute_dtype(session.loaded.model) != torch.bfloat16:
        pytest.skip("the dtype probe chose fp32 on this CPU")
    path = tmp_path / "doc.txt"
    rng = random.Random(3)
    path.write_text("\n".join(filler_lines(rng, 300) + [GATE] + filler_lines(rng, 300)))
    question = "What is the gate code of the north depot?"
    native = session.read(str(path))
    assert "AVX-512 BF16 kernel" in native.compute or pytest.skip("the probe found torch's kernels faster here")
    monkeypatch.setenv("LOCRET_NATIVE_ATTENTION", "0")
    built_kernel.cache_clear(), chosen_kernel.cache_clear()
    try:
        plain = session.read(str(path))
    finally:
        built_kernel.cache_clear(), chosen_kernel.cache_clear()
        monkeypatch.undo()
        native_attention.install()
    assert "kernel" not in plain.compute
    assert native.ask(question).answer == plain.ask(question).answer == GATE
