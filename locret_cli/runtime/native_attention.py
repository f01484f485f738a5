"""Attention over locret's cache by a small C kernel of its own, built on this machine for AVX-512 BF16.

torch's CPU flash kernel runs at a fraction of the CPU's bf16 product rate, and a chunk's attention over the kept
entries was most of a bounded read on the CPUs measured (docs/measurements/attention-kernel.md).
`native/flash_bf16.c` computes what torch's flash kernel does (bf16 products summed in fp32, an online softmax in
fp32, probabilities rounded to bf16 for the values' product) for a chunk, its causal part and the kept entries in one
pass, with no key copied for the heads that share one; and, by a second function that reads the keys as stored, for
a decode step's one query per head.

It is compiled once per source and CPU and loaded as `runtime/native_build.py` says (a private cache folder, never
a library someone else could have written). A probe then times
each function against torch's kernels, once per CPU, torch version and thread count (cached beside the dtype
probe's), and `install` hands chunks and decode steps to it where it ran faster. Attention stays torch's where the
CPU lacks AVX-512 BF16, no compiler builds it, the probe found it slower, or `LOCRET_NATIVE_ATTENTION=0`.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time

import torch

from locret_cli.core.attention.over_cache import split_attention, use_attention_kernel
from locret_cli.runtime import native_build
from locret_cli.runtime.dtype_probe import cache_file, cpuinfo, machine_key, measured_once

SOURCE = native_build.NATIVE / "flash_bf16.c"
PROBES = {"chunks": (9, 3, 512, 1536), "decode steps": (9, 3, 1, 4096)}  # heads, KV heads, queries, entries
CHUNK_ROWS = 16  # chunks of fewer queries (a short question) stay with torch: packing the keys costs more
I64, I32, POINTER = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
CHUNK_ARGUMENTS = [POINTER, I64, I64, POINTER, I64, I64, POINTER, I64, I64, I32, I32, I32, I32, I32, ctypes.c_float,
                   I32, POINTER, I64, I64, POINTER]
ONE_QUERY_ARGUMENTS = [POINTER, I64, POINTER, I64, I64, POINTER, I64, I64, I32, I32, I32, I32, ctypes.c_float, POINTER,
                       I64]


class NativeKernel:
    """The built kernel, as `cache_attention.use_attention_kernel` takes it: chunks of `CHUNK_ROWS` queries or more
    (`flash_bf16`), one query per head (`one_query_bf16`), each where `takes` names it."""

    def __init__(self, library: ctypes.CDLL, build: str, takes: frozenset[str] = frozenset(PROBES)):
        self.chunk, self.one_query = library.flash_bf16, library.one_query_bf16
        for function, arguments in ((self.chunk, CHUNK_ARGUMENTS), (self.one_query, ONE_QUERY_ARGUMENTS)):
            function.restype, function.argtypes = I32, arguments
        self.library, self.build, self.takes = library, build, takes  # build: the hash naming source, compiler, CPU

    def fits(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
        """bf16 on the CPU, batch 1, a head size the kernel handles, whole groups of at most 16 heads per KV head, and
        a chunk or one query it `takes`."""
        length = query.shape[2]
        shape = "decode steps" if length == 1 else "chunks" if length >= CHUNK_ROWS else None
        return (shape in self.takes and query.shape[0] == 1 and query.shape[-1] % 32 == 0
                and query.shape[-1] <= 256 and query.shape[1] % key.shape[1] == 0
                and query.shape[1] // key.shape[1] <= 16
                and all(t.dtype == torch.bfloat16 and t.device.type == "cpu" and t.stride(-1) == 1
                        for t in (query, key, value)))

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
        """Attention of query (1, heads, T, D) over key, value (1, kv_heads, n, D) whose last T entries are the
        queries' own (causal among themselves): (1, heads, T, D), laid out as (1, T, heads, D) in memory."""
        _, heads, length, dim = query.shape
        group, entries = heads // key.shape[1], key.shape[2]
        out = torch.empty(1, length, heads, dim, dtype=torch.bfloat16)
        if length == 1:
            status = self.one_query(query.data_ptr(), query.stride(1), key.data_ptr(), key.stride(1), key.stride(2),
                                    value.data_ptr(), value.stride(1), value.stride(2), heads, group, entries, dim,
                                    scale, out.data_ptr(), out.stride(2))
        else:
            status = self.chunk(query.data_ptr(), query.stride(1), query.stride(2), key.data_ptr(), key.stride(1),
                                key.stride(2), value.data_ptr(), value.stride(1), value.stride(2), heads, group, length,
                                entries, dim, scale, 1, out.data_ptr(), out.stride(2), out.stride(1), None)
        if status != 0:
            raise RuntimeError(f"the native attention kernel failed ({status}) for {tuple(query.shape)}")
        return out.transpose(1, 2)


def install() -> str | None:
    """Hand chunks' and decode steps' attention to the native kernel where it is built and ran faster than torch's
    kernels here, each on its own; the rest to torch's. Returns a line for the cost table, or None where attention
    stays torch's."""
    kernel, line = chosen_kernel()
    use_attention_kernel(torch.bfloat16, kernel)
    return line


@functools.cache
def chosen_kernel() -> tuple[NativeKernel | None, str | None]:
    """The kernel taking what its probe found faster here, and its cost-table line; (None, None) for none. Once per
    process."""
    kernel = built_kernel()
    seconds = {} if kernel is None else probe(kernel)
    takes = frozenset(shape for shape, (native, plain) in seconds.items() if native < plain)
    if not takes:
        return None, None
    ratios = ", ".join(f"{shape} {seconds[shape][1] / seconds[shape][0]:.1f}x" for shape in PROBES if shape in takes)
    return (NativeKernel(kernel.library, kernel.build, takes),
            f"attention by locret's AVX-512 BF16 kernel ({ratios} torch's here)")


@functools.cache
def built_kernel() -> NativeKernel | None:
    """The kernel, where this CPU has AVX-512 BF16 and a compiler builds it (and `LOCRET_NATIVE_ATTENTION` is not
    0); else None."""
    if os.environ.get("LOCRET_NATIVE_ATTENTION") == "0" or "avx512_bf16" not in cpuinfo("flags").split():
        return None
    built = build()
    if built is None:
        return None
    return NativeKernel(*built)


def build() -> tuple[ctypes.CDLL, str] | None:
    """The kernel's library and the hash that names it (`native_build.build`), or None where none is built."""
    return native_build.build(SOURCE)


def probe(kernel: NativeKernel) -> dict[str, tuple[float, float]]:
    """Seconds, (native, torch's), for each shape of `PROBES`, the best of five each; measured once per machine key
    (`dtype_probe.machine_key`) and build, then read from the cache."""
    seconds = measured_once(cache_file().with_name("native-attention.json"),
                            f"{machine_key()} | native attention {kernel.build}",
                            lambda stored: isinstance(stored, dict) and set(stored) == set(PROBES),
                            lambda: {shape: measure(kernel, *sizes) for shape, sizes in PROBES.items()})
    return {shape: tuple(pair) for shape, pair in seconds.items()}


def measure(kernel: NativeKernel, heads: int, kv_heads: int, length: int, entries: int) -> tuple[float, float]:
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, length, heads, 64, generator=generator).bfloat16().transpose(1, 2)
    key, value = (torch.randn(1, kv_heads, entries, 64, generator=generator).bfloat16() for _ in range(2))
    return against_torch(kernel.attend, query, key, value)


def against_torch(attend, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[float, float]:
    """Seconds, (`attend`'s, torch's kernels'), each the best of five calls after one not counted."""
    best = []
    for run in (attend, split_attention):
        run(query, key, value, 0.125)
        times = []
        for _ in range(5):
            started = time.perf_counter()
            run(query, key, value, 0.125)
            times.append(time.perf_counter() - started)
        best.append(min(times))
    return best[0], best[1]
