"""`locret bench`: the same documents and questions through every policy, one fresh process per cell and repeat.

    from locret_cli.bench import BenchConfig, run_bench
    from locret_cli.models.spec import ModelSpec
    result = run_bench(BenchConfig(ModelSpec(arch="smollm2-135m"), policies=["full", "locret"], lengths=[8192, 32768]))
    print(result.to_json()["rows"])
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import torch
import transformers

from locret_cli.bench import haystack, natural
from locret_cli.bench.baselines import baseline_variant, is_baseline
from locret_cli.bench.flops import matmul_rate, memory_rate
from locret_cli.bench.rag import MIN_RAG_TOKENS, RAG_TOKENS
from locret_cli.bench.tasks import NATURAL, TASKS, answer_tokens
from locret_cli.core.policies import POLICY_NAMES
from locret_cli.errors import LocretError, SettingError
from locret_cli.models.loading import resolve_device, resolve_dtype
from locret_cli.models.spec import ModelSpec
from locret_cli.runtime.dtype_probe import cpu_name
from locret_cli.settings import split_given

ROW_FIELDS = ("task", "length", "policy", "accuracy", "right_accuracy", "verdicts", "kv_peak_bytes", "peak_bytes",
              "prefill_tokens_per_s", "decode_tokens_per_s", "time_to_first_token_s", "skipped", "document_tokens",
              "read_tokens", "questions", "flops", "measured_s", "roofline_s", "phases", "repeats", "settings",
              "by_depth", "by_kind")
MEDIAN_FIELDS = ("accuracy", "right_accuracy", "kv_peak_bytes", "peak_bytes", "prefill_tokens_per_s",
                 "decode_tokens_per_s", "time_to_first_token_s", "measured_s")


@dataclass
class BenchConfig:
    """Everything a bench run depends on: the model each row loads (the row names its policy), the settings given by
    name (those left out take the model's recorded defaults; `max_new_tokens`, the task's own: `tasks.answer_tokens`),
    and what the bench itself runs: the policies' rows, then the baselines' (`baselines.py`), each baseline reading at
    most `rag_tokens` tokens unless its row says otherwise."""

    model: ModelSpec = field(default_factory=ModelSpec)
    settings: dict = field(default_factory=dict)
    policies: list[str] = field(default_factory=lambda: list(POLICY_NAMES))
    lengths: list[int] = field(default_factory=lambda: [4096, 16384])
    tasks: list[str] = field(default_factory=lambda: ["needle"])
    data: str | None = None
    samples: int = 3
    repeat: int = 1
    memory_limit_gb: float | None = None
    baselines: list[str] = field(default_factory=list)
    rag_tokens: int = RAG_TOKENS

    @property
    def rows(self) -> list[str]:
        return [*self.policies, *self.baselines]

    def checked(self) -> "BenchConfig":
        self.model.checked()  # which model options combine (`ModelSpec.checked`)
        split_given(self.settings)  # only settings the schema declares
        unknown = [p for p in self.policies if row_variant(p)[0] not in POLICY_NAMES]
        if unknown or not self.rows:
            raise LocretError(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICY_NAMES)}")
        if self.rag_tokens < MIN_RAG_TOKENS:
            raise SettingError("{rag_tokens} must be at least " + f"{MIN_RAG_TOKENS} tokens")
        for row in self.baselines:
            baseline_variant(row, self.rag_tokens)  # a known baseline, and a cap of its own of at least as many
        bad_tasks = [t for t in self.tasks if t not in TASKS]
        if bad_tasks and not self.data:
            raise SettingError("unknown task {bad}; choose " + ", ".join(TASKS) + ", or pass {data} FILE",
                               bad=", ".join(bad_tasks))
        if "niah" in self.tasks and not self.data:
            haystack.essays()  # without the package, its pip line now, not from every cell
        for task in set(self.tasks) & set(NATURAL):
            natural.load(NATURAL[task])  # a missing or other version of a source package: its pip line now
        if not self.lengths or min(self.lengths) < 64:
            raise SettingError("{lengths} must list token counts of at least 64, such as 4k,16k")
        if self.samples < 1 or self.repeat < 1:
            raise SettingError("{samples} and {repeat} must be at least 1")
        return self


@dataclass
class BenchResult:
    config: dict
    rows: list[dict]

    def to_json(self) -> dict:
        return {"config": self.config, "rows": self.rows}


def parse_lengths(spec: str) -> list[int]:
    """'4k,16k,128k' -> [4096, 16384, 131072]; plain numbers are token counts."""
    out = []
    for item in spec.split(","):
        item = item.strip().lower()
        try:
            out.append(int(float(item[:-1]) * 1024) if item.endswith("k") else int(item))
        except ValueError:
            raise SettingError("{lengths}: {item!r} is not a token count such as 4096 or 4k", item=item) from None
    return out


def run_bench(config: BenchConfig, on_cell: Callable[[str, int, int], None] = lambda *_: None) -> BenchResult:
    """Run every (task, length, policy) cell `config.repeat` times, each in a fresh process; rows hold medians."""
    config.checked()
    device = resolve_device(config.model.device)
    rate = matmul_rate(device, resolve_dtype(config.model.dtype, device))
    bandwidth = memory_rate(device)
    tasks, lengths = (["data"], [None]) if config.data else (config.tasks, config.lengths)
    cells = [(t, n, p) for t in tasks for n in ([None] if t in NATURAL else lengths) for p in config.rows]
    rows, resolved, best = [], {}, -1
    for index, (task, length, policy) in enumerate(cells):
        on_cell(f"{task} {length or ''} {policy}".replace("  ", " "), index, len(cells))
        runs = [run_cell_process(cell_spec(config, task, length, policy)) for _ in range(config.repeat)]
        rank = 2 * ("skipped" not in runs[0]) + (not is_baseline(policy))  # the last policy row that ran, if any
        if rank >= best:
            resolved, best = {k: runs[0].get(k) for k in ("model", "settings", "peak_kind", "compute")}, rank
        rows.append(summarise(task, length, policy, runs, rate, bandwidth))
    on_cell("done", len(cells), len(cells))
    return BenchResult(resolved_config(config, resolved, rate, bandwidth, device), rows)


ROW_MODEL_FIELDS = ("reader", "heads")  # a row may change these of the model it loads: locret:reread=0:reader=off


def row_variant(row: str) -> tuple[str, dict]:
    """A row of the bench: a policy, and the settings (or ROW_MODEL_FIELDS) that row changes.
    'locret:reread=0:span=64' is ('locret', {'reread': 0, 'span': 64}); an unknown setting raises SettingError."""
    policy, *pairs = row.split(":")
    changed = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not value:
            raise SettingError("{policies}: {pair!r} is not SETTING=VALUE, as in locret:reread=1", pair=pair)
        changed[name.replace("-", "_")] = number(value)
    split_given({k: v for k, v in changed.items() if k not in ROW_MODEL_FIELDS})
    return policy, changed


def number(value: str) -> int | float | str:
    """A row setting's value: an int or a float where it reads as one, else the text."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def cell_spec(config: BenchConfig, task: str, length: int | None, row: str) -> dict:
    policy, changed = ("full", {}) if is_baseline(row) else row_variant(row)  # a baseline reads with a full cache
    model = {k: str(changed.pop(k)) for k in ROW_MODEL_FIELDS if k in changed}
    settings = {**config.settings, "max_new_tokens": config.settings.get("max_new_tokens") or answer_tokens(task),
                **changed, "policy": policy}
    limit = int(config.memory_limit_gb * 2**30) if config.memory_limit_gb else None
    return {"length": length, "task": task, "samples": config.samples, "settings": settings, "row": row,
            "model": replace(config.model, **model).to_json(), "data": config.data,
            "memory_limit_bytes": limit, "rag_tokens": config.rag_tokens}


def run_cell_process(spec: dict) -> dict:
    """Run one cell in a fresh Python process; its result, or LocretError with the reason it failed."""
    process = subprocess.run([sys.executable, "-m", "locret_cli.bench.cell"], input=json.dumps(spec),
                             capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    lines = process.stdout.strip().splitlines()
    if process.returncode != 0 or not lines:
        last = (process.stderr.strip().splitlines() or ["no output"])[-1]
        raise LocretError(f"bench cell {spec['row']} at {spec['length']} tokens failed "
                          f"(exit {process.returncode}): {last}")
    reply = json.loads(lines[-1])
    if "error" in reply:
        raise LocretError(reply["error"])
    return reply["ok"]


def summarise(task: str, length: int | None, policy: str, runs: list[dict], rate: float, bandwidth: float) -> dict:
    """One row: the median of each measured figure over the repeats, and each phase's share of its roofline."""
    row = dict.fromkeys(ROW_FIELDS)
    row.update(task=task, length=length, policy=policy, repeats=len(runs), settings=runs[0].get("settings"))
    if "skipped" in runs[0]:
        row["skipped"] = runs[0]["skipped"]
        return row
    for name in MEDIAN_FIELDS:
        values = [r[name] for r in runs if r[name] is not None]
        row[name] = statistics.median(values) if values else None
    for name in ("document_tokens", "read_tokens", "questions", "flops", "verdicts"):
        row[name] = runs[0][name]
    row["by_depth"], row["by_kind"] = runs[0].get("by_depth"), runs[0].get("by_kind")
    row["length"] = length if length is not None else row["document_tokens"]
    row["roofline_s"] = row["flops"] / rate
    row["phases"] = phase_rooflines(runs, rate, bandwidth)
    return row


def phase_rooflines(runs: list[dict], rate: float, bandwidth: float) -> dict:
    """Per phase, the median measured seconds and the roofline: prefill's FLOPs at the matmul rate, decode's bytes
    at the memory read rate (`bench/flops.py`); `roofline_ratio` is the roofline over the measured time."""
    phases = {}
    for name, floor in (("prefill", lambda p: p["flops"] / rate), ("decode", lambda p: p["bytes"] / bandwidth)):
        seconds = statistics.median(r["phases"][name]["seconds"] for r in runs)
        phase = {**runs[0]["phases"][name], "seconds": seconds, "roofline_s": floor(runs[0]["phases"][name])}
        phase["roofline_ratio"] = phase["roofline_s"] / seconds if seconds > 0 else None
        phases[name] = phase
    return phases


def resolved_config(config: BenchConfig, resolved: dict, rate: float, bandwidth: float, device: torch.device) -> dict:
    """The configuration as run: the options, the settings the model's defaults resolved them to, and the machine."""
    return {
        **asdict(config),
        "model_name": resolved.get("model"),
        "compute": resolved.get("compute"),  # the dtype and why, and whether linears were packed
        "settings": resolved.get("settings"),
        "accuracy_meaningful": config.model.arch is None,
        "peak_memory_measures": resolved.get("peak_kind"),
        "matmul_flops_per_s": rate,
        "memory_bytes_per_s": bandwidth,
        "hardware": torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_name()} ({os.cpu_count()} cores)",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
