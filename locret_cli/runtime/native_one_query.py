"""A decode step's attention in fp32 by a small C kernel of locret's own (`native/one_query_f32.c`), for CPUs with
AVX2 and FMA.

Where a model computes in fp32 on the CPU (the dtype probe's choice where bf16 products are slow), its cache is
fp32, and a decode step's attention reads every kept key and value once. torch's flash kernel reads them well below
the memory's rate for one query; this kernel splits each KV head's entries into runs that the threads take, and
merges them (docs/measurements/attention-kernel.md). It is built as `runtime/native_build.py` builds every kernel; a
probe times it against torch's kernel once per CPU, torch version and thread count (cached beside the dtype
probe's), and `install` hands decode steps to it where it ran faster. Chunks, and every dtype but fp32, stay with
torch's kernels (bf16 ones with `native_attention.py`'s); so does a step whose gradients are wanted, and every step
with `LOCRET_NATIVE_ATTENTION=0`.
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch

from locret_cli.core.attention.over_cache import use_attention_kernel
from locret_cli.runtime import native_build
from locret_cli.runtime.dtype_probe import cache_file, cpuinfo, machine_key, measured_once
from locret_cli.runtime.native_attention import against_torch

SOURCE = native_build.NATIVE / "one_query_f32.c"
PROBE = (9, 3, 4096)  # heads, KV heads, entries, of head size 64
I64, I32, POINTER = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
ARGUMENTS = [POINTER, I64, POINTER, I64, I64, POINTER, I64, I64, I32, I32, I32, I32, ctypes.c_float, POINTER, I64]


class OneQueryKernel:
    """The built kernel, as `cache_attention.use_attention_kernel` takes it: one fp32 query per head."""

    def __init__(self, library: ctypes.CDLL, build: str):
        self.function = library.one_query_f32
        self.function.restype, self.function.argtypes = I32, ARGUMENTS
        self.build = build  # the hash naming source, compiler and CPU

    def fits(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
        """One fp32 query per head on the CPU, batch 1, a head size that is a multiple of 16 up to 256, and whole
        groups of at most 16 heads per KV head."""
        return (query.shape[0] == 1 and query.shape[2] == 1 and key.shape[2] > 0 and query.shape[-1] % 16 == 0
                and query.shape[-1] <= 256 and query.shape[1] % key.shape[1] == 0
                and query.shape[1] // key.shape[1] <= 16
                and all(t.dtype == torch.float32 and t.device.type == "cpu" and t.stride(-1) == 1
                        for t in (query, key, value)))

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
        """Attention of query (1, heads, 1, D) over every entry of key, value (1, kv_heads, n, D): (1, heads, 1, D)."""
        _, heads, _, dim = query.shape
        out = torch.empty(1, 1, heads, dim)
        status = self.function(query.data_ptr(), query.stride(1), key.data_ptr(), key.stride(1), key.stride(2),
                               value.data_ptr(), value.stride(1), value.stride(2), heads, heads // key.shape[1],
                               key.shape[2], dim, scale, out.data_ptr(), out.stride(2))
        if status != 0:
            raise RuntimeError(f"the native one-query kernel failed ({status}) for {tuple(query.shape)}")
        return out.transpose(1, 2)


def install() -> str | None:
    """Hand fp32 decode steps' attention to the kernel where it is built and ran faster than torch's here; else
    leave them to torch's. Returns a line for the cost table, or None."""
    kernel, line = chosen_kernel()
    use_attention_kernel(torch.float32, kernel)
    return line


@functools.cache
def chosen_kernel() -> tuple[OneQueryKernel | None, str | None]:
    """The kernel and its cost-table line where its probe ran faster than torch's kernel; (None, None) otherwise.
    Once per process."""
    kernel = built_kernel()
    if kernel is None:
        return None, None
    native, plain = probe(kernel)
    if native >= plain:
        return None, None
    return kernel, f"decode steps' attention by locret's AVX2 kernel ({plain / native:.1f}x torch's here)"


@functools.cache
def built_kernel() -> OneQueryKernel | None:
    """The kernel, where this CPU has AVX2 and FMA and a compiler builds it (and `LOCRET_NATIVE_ATTENTION` is not
    0); else None."""
    if os.environ.get("LOCRET_NATIVE_ATTENTION") == "0" or not {"avx2", "fma"} <= set(cpuinfo("flags").split()):
        return None
    built = native_build.build(SOURCE)
    return None if built is None else OneQueryKernel(*built)


def probe(kernel: OneQueryKernel) -> tuple[float, float]:
    """Seconds, (native, torch's), for `PROBE`'s shape, the best of five each; measured once per machine key and
    build, then read from the cache."""
    seconds = measured_once(cache_file().with_name("native-attention.json"),
                            f"{machine_key()} | fp32 one query {kernel.build}",
                            lambda stored: isinstance(stored, list) and len(stored) == 2, lambda: measure(kernel))
    return seconds[0], seconds[1]


def measure(kernel: OneQueryKernel) -> list[float]:
    heads, kv_heads, entries = PROBE
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, heads, 1, 64, generator=generator)
    key, value = (torch.randn(1, kv_heads, entries, 64, generator=generator) for _ in range(2))
    return list(against_torch(kernel.attend, query, key, value))
