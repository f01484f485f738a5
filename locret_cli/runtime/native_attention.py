"""A chunk's attention over locret's cache in one call of a small C kernel, built on this machine for AVX-512 BF16.

torch's CPU flash kernel runs at 120-165 GFLOP/s on AMD Zen 4 and Zen 5, a sixth to a quarter of their bf16 product
rate, and a chunk's attention over the kept entries was most of a bounded read there (docs/cpus.md). `native/flash_bf16.c`
computes the same attention as torch's flash kernel does (bf16 products summed in fp32, an online softmax in fp32,
probabilities rounded to bf16 for the values' product), with the chunk's causal part and the kept entries in one
pass, and no key copied for the heads that share one.

It is compiled once per source and CPU with the system's C compiler (`cc -O3 -march=native -fopenmp`) into the cache
folder (`$XDG_CACHE_HOME/locret/native`, default ~/.cache), loaded with ctypes, and runs on torch's own OpenMP
threads. A probe then times it against torch's kernels on a chunk's shape, once per CPU, torch version and thread
count (cached beside the dtype probe's), and `install` hands chunks to it only where it ran faster. Attention stays
torch's where the CPU lacks AVX-512 BF16, no compiler builds it, the probe found it slower, or
`LOCRET_NATIVE_ATTENTION=0`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from locret_cli.core.cache_attention import split_attention, use_chunk_kernel
from locret_cli.runtime.dtype_probe import cache_file, cpu_name, machine_key

SOURCE = Path(__file__).parent / "native" / "flash_bf16.c"
FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]
PROBE_SHAPE = (9, 3, 512, 1536, 64)  # heads, KV heads, chunk, entries, head size: a small model's chunk
I64, I32 = ctypes.c_int64, ctypes.c_int


class NativeKernel:
    """The built kernel, as `cache_attention.use_chunk_kernel` takes it."""

    min_rows = 16  # fewer queries (a decode step, a short question): packing the keys would cost more than it saves

    def __init__(self, function: Callable, build: str):
        self.function, self.build = function, build  # build: the hash naming the source, compiler and CPU

    def fits(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
        """bf16 on the CPU, batch 1, a head size the kernel handles, whole groups of heads per KV head."""
        return (query.shape[0] == 1 and query.shape[-1] % 32 == 0 and query.shape[-1] <= 256
                and query.shape[1] % key.shape[1] == 0
                and all(t.dtype == torch.bfloat16 and t.device.type == "cpu" and t.stride(-1) == 1
                        for t in (query, key, value)))

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
        """Attention of query (1, heads, T, D) over key, value (1, kv_heads, n, D) whose last T entries are the
        queries' own (causal among themselves): (1, heads, T, D), laid out as (1, T, heads, D) in memory."""
        _, heads, length, dim = query.shape
        out = torch.empty(1, length, heads, dim, dtype=torch.bfloat16)
        status = self.function(
            query.data_ptr(), query.stride(1), query.stride(2), key.data_ptr(), key.stride(1), key.stride(2),
            value.data_ptr(), value.stride(1), value.stride(2), heads, heads // key.shape[1], length, key.shape[2],
            dim, scale, 1, out.data_ptr(), out.stride(2), out.stride(1), None)
        if status != 0:
            raise RuntimeError(f"the native attention kernel failed ({status}) for {tuple(query.shape)}")
        return out.transpose(1, 2)


def install() -> str | None:
    """Hand chunks' attention to the native kernel where it is built and ran faster than torch's kernels here, else
    to torch's. Returns a line for the cost table, or None where attention stays torch's."""
    kernel = built_kernel()
    seconds = None if kernel is None else probe(kernel)
    faster = seconds is not None and seconds["native"] < seconds["torch"]
    use_chunk_kernel(kernel if faster else None)
    if not faster:
        return None
    return f"attention by locret's AVX-512 BF16 kernel ({seconds['torch'] / seconds['native']:.1f}x torch's here)"


@functools.cache
def built_kernel() -> NativeKernel | None:
    """The kernel, where this CPU has AVX-512 BF16 and a compiler builds it (and `LOCRET_NATIVE_ATTENTION` is not
    0); else None."""
    if os.environ.get("LOCRET_NATIVE_ATTENTION") == "0" or "avx512_bf16" not in cpu_flags():
        return None
    built = build()
    if built is None:
        return None
    library, name = built
    function = library.flash_bf16
    function.restype = I32
    function.argtypes = [ctypes.c_void_p, I64, I64, ctypes.c_void_p, I64, I64, ctypes.c_void_p, I64, I64, I32, I32,
                         I32, I32, I32, ctypes.c_float, I32, ctypes.c_void_p, I64, I64, ctypes.c_void_p]
    return NativeKernel(function, name)


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def build() -> tuple[ctypes.CDLL, str] | None:
    """The kernel's library and the hash that names it, compiled once per source, compiler and CPU (its name and
    flags) into the cache folder (into a new private temporary folder where that cannot be written); None where no
    compiler builds it."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    built_for = " ".join([compiler, *FLAGS, cpu_name(), *sorted(cpu_flags())])
    name = hashlib.sha256(SOURCE.read_bytes() + built_for.encode()).hexdigest()[:16]
    for folder in (lambda: cache_file().parent / "native", lambda: Path(tempfile.mkdtemp(prefix="locret-native-"))):
        try:
            target = folder() / f"flash_bf16-{name}.so"
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.{os.getpid()}")
                done = subprocess.run([compiler, *FLAGS, "-o", str(partial), str(SOURCE)], capture_output=True,
                                      check=False, timeout=120)
                if done.returncode != 0:
                    return None
                os.replace(partial, target)
            return ctypes.CDLL(str(target)), name
        except (OSError, subprocess.SubprocessError):
            continue
    return None


@functools.cache
def probe(kernel: NativeKernel) -> dict[str, float]:
    """Seconds for one chunk-shaped attention by torch's kernel and by the native one, the best of three each;
    measured once per machine key (`dtype_probe.machine_key`), then read from the cache."""
    key, path = f"{machine_key()} | native attention {kernel.build}", cache_file().with_name("native-attention.json")
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    seconds = cached.get(key)
    if not (isinstance(seconds, dict) and {"torch", "native"} <= set(seconds)):
        seconds = measure(kernel)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**cached, key: seconds}, indent=1) + "\n")
        except OSError:
            pass  # an unwritable cache only means measuring again next time
    return seconds


def measure(kernel: NativeKernel) -> dict[str, float]:
    heads, kv_heads, length, entries, dim = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, heads, length, dim, generator=generator).bfloat16()
    key, value = (torch.randn(1, kv_heads, entries, dim, generator=generator).bfloat16() for _ in range(2))
    runs = {"torch": lambda: split_attention(query, key, value, dim ** -0.5),
            "native": lambda: kernel.attend(query, key, value, dim ** -0.5)}
    seconds = {}
    for name, run in runs.items():
        run()
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        seconds[name] = min(times)
    return seconds
