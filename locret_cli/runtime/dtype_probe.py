"""`--dtype auto` on the CPU: bf16 or fp32, chosen by timing both on this machine, once.

A CPU flag does not settle it. A CPU with AVX512-BF16 can still decode slower in bf16 than in fp32 (transformers'
bf16 RMSNorm above all), while on one with AMX bf16 matrix products run several times faster than fp32
(docs/measurements/performance.md, docs/measurements/zen4.md). So the probe runs a small decoder block (RMSNorm as
transformers computes it, attention projections, a SiLU MLP) in both dtypes, one row at a time as decoding does
and 128 rows at a time as prefill does, and keeps the faster. It runs on one thread, each dtype three times in
turn, and keeps each dtype's fastest run: another process on the cores slows a round, and with every thread in use
it slowed bf16 rounds many times more than fp32 ones (on a Zen 5 CPU whose bf16 runs 2.8x faster alone, the probe
beside a read chose fp32). It takes a fraction of a second, and the choice is cached per CPU, torch version and
thread count in `$XDG_CACHE_HOME/locret/dtype-probe.json` (default ~/.cache).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from locret_cli.runtime.packed_linear import pack_linears

PROBE_VERSION = 3  # 2: only one-row products packed, as locret now packs them; 3: one thread, the best of 3 turns
TURNS = 3  # each dtype's runs, in turn with the other's
WIDTH, FFN = 576, 1536  # a small model's sizes; what matters is how each dtype's kernels behave, not the model
ROUNDS = {1: 24, 128: 3}  # input rows -> repetitions (decode-like, prefill-like)


@dataclass(frozen=True)
class DtypeChoice:
    dtype: torch.dtype
    reason: str  # one line for the cost table


def cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "locret" / "dtype-probe.json"


def machine_key() -> str:
    """What the measurement depends on: the CPU model, torch and the threads it may use."""
    return f"{cpu_name()} | torch {torch.__version__} | {torch.get_num_threads()} threads | v{PROBE_VERSION}"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


def cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("model name", "flags"), or "" where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def measured_once(path: Path, key: str, complete: Callable[[object], bool], measure: Callable[[], object]):
    """What `measure()` gives, read from the JSON cache `path` under `key` where `complete` accepts the stored value;
    else measured and stored (an unwritable cache only means measuring again next time)."""
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    value = cached.get(key)
    if not complete(value):
        value = measure()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({**cached, key: value}, indent=1) + "\n")
        except OSError:
            pass
    return value


class ProbeBlock(torch.nn.Module):
    """One decoder layer's worth of work, without attention scores: norm, q/k/v/o, norm, gated MLP."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 2 * WIDTH, bias=False)
        self.o = torch.nn.Linear(WIDTH, WIDTH, bias=False)
        self.gate_up = torch.nn.Linear(WIDTH, 2 * FFN, bias=False)
        self.down = torch.nn.Linear(FFN, WIDTH, bias=False)
        self.norm = torch.nn.Parameter(torch.ones(WIDTH))

    def rms_norm(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.norm * h.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.o(self.qkv(self.rms_norm(x))[..., :WIDTH])
        gate, up = self.gate_up(self.rms_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


@torch.no_grad()
def probe_seconds(dtype: torch.dtype) -> float:
    """Seconds the probe block takes in `dtype` (linears packed as locret packs them), after one warm-up pass."""
    torch.manual_seed(0)
    block = ProbeBlock().to(dtype)
    pack_linears(block)
    inputs = {rows: torch.randn(1, rows, WIDTH, dtype=dtype) for rows in ROUNDS}
    for x in inputs.values():
        block(x)
    started = time.perf_counter()
    for rows, repeats in ROUNDS.items():
        for _ in range(repeats):
            block(inputs[rows])
    return time.perf_counter() - started


def best_turns() -> dict[str, float]:
    """Each dtype's fastest of TURNS probe runs, taken in turn on one thread (the caller's threads restored)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = [(name, probe_seconds(dtype)) for _ in range(TURNS)
                for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32))]
    finally:
        torch.set_num_threads(threads)
    return {name: min(t for n, t in runs if n == name) for name in ("bf16", "fp32")}


def measured_cpu_dtype() -> DtypeChoice:
    """bf16 or fp32, whichever ran the probe faster here; measured once per machine key, then read from the cache."""
    seconds = measured_once(cache_file(), machine_key(),
                            lambda stored: isinstance(stored, dict) and {"bf16", "fp32"} <= set(stored), best_turns)
    faster, slower = ("bf16", "fp32") if seconds["bf16"] < seconds["fp32"] else ("fp32", "bf16")
    ratio = seconds[slower] / seconds[faster]
    dtype = torch.bfloat16 if faster == "bf16" else torch.float32
    return DtypeChoice(dtype, f"{faster}: {ratio:.1f}x faster than {slower} in this CPU's probe")
