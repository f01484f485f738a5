"""Bench results for people and for files: the Rich table, CSV and a plot, each with the resolved config beside it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rich.table import Table
from rich.text import Text

from locret_cli.bench.baselines import READS
from locret_cli.bench.suite import ROW_FIELDS, BenchResult
from locret_cli.errors import SettingError
from locret_cli.units import human_bytes


def bench_table(result: BenchResult) -> Table:
    """One row per (task, length, policy): accuracy, memory, speed and the share of the matmul roofline reached. Its
    strings (task, policy and model names among them) are for a console without markup (`cli.app.plain_console`)."""
    config = result.config
    settings = config.get("settings") or {}
    rate = config["matmul_flops_per_s"]
    title = (f"{config['model_name']}: budget {settings.get('budget')}, chunk {settings.get('chunk_size')}, "
             f"stabilizers {settings.get('stabilizers')}, {settings.get('positions')} positions")
    caption = [f"roofline: the run's model FLOPs at this machine's measured matmul rate ({rate / 1e12:.2f} TFLOP/s); "
               "'% roofline' = that time over the measured time",
               f"prefill / decode: each phase's share of its own roofline (decode: weights and cache read at "
               f"{config['memory_bytes_per_s'] / 1e9:.1f} GB/s per step)"]
    caption += baseline_lines(result.rows)
    if not config["accuracy_meaningful"]:
        caption.insert(0, "accuracy is meaningless here: --arch builds random weights; speed and memory are real")
    table = Table(title=title, caption="\n".join(caption), header_style="bold")
    longest = max((len(row["policy"]) for row in result.rows), default=0)
    for name, justify in [("task", "left"), ("tokens", "right"), ("policy", "left"), ("exact", "right"),
                          ("right", "right"), ("made up", "right"), ("bound wrong", "right"), ("KV peak", "right"), ("peak memory", "right"),
                          ("prefill tok/s", "right"), ("decode tok/s", "right"), ("TTFT", "right"),
                          ("% roofline", "right"), ("prefill / decode", "right")]:
        table.add_column(name, justify=justify, min_width=min(longest, 32) if name == "policy" else None)
    previous = None
    for row in result.rows:
        group = (row["task"], row["length"])
        if row["length"] is None and previous is not None and previous[0] == row["task"]:
            group = previous  # a skipped row of documents with their own lengths: the rows beside it
        if previous is not None and group != previous:
            table.add_section()
        previous = group
        head = [row["task"], "-" if row["length"] is None else f"{row['length']:,}", row["policy"]]
        if row["skipped"]:
            table.add_row(*head, Text(f"skipped: {row['skipped']}", style="yellow"), *[""] * 10)
            continue
        table.add_row(
            *head, _share(row["accuracy"]), _share(row["right_accuracy"]), *_counts(row.get("verdicts")),
            human_bytes(row["kv_peak_bytes"]),
            human_bytes(row["peak_bytes"]), f"{row['prefill_tokens_per_s']:,.0f}",
            "-" if row["decode_tokens_per_s"] is None else f"{row['decode_tokens_per_s']:,.1f}",
            f"{row['time_to_first_token_s']:.2f} s", f"{100 * row['roofline_s'] / row['measured_s']:.1f}%",
            " / ".join(_share(row["phases"][name]["roofline_ratio"]) for name in ("prefill", "decode")),
        )
    return table


def baseline_lines(rows: list[dict]) -> list[str]:
    """What each baseline row that ran read (`baselines.py`), one line a row."""
    lines = {}
    for row in rows:
        settings = row.get("settings") or {}
        if "baseline" in settings and not row["skipped"]:
            lines[row["policy"]] = (f"{row['policy']}: {READS[settings['baseline']]}, at most "
                                    f"{settings['rag_tokens']:,} tokens a question, read with a full cache")
    return list(lines.values())


def kinds_table(result: BenchResult) -> Table | None:
    """The kinds task's right answers by kind of question (`scoring.py`), one row per (length, policy); None when no row
    has them."""
    rows = [row for row in result.rows if row.get("by_kind")]
    if not rows:
        return None
    kinds = list(dict.fromkeys(kind for row in rows for kind in row["by_kind"]))
    table = Table(title="right answers by kind of question", header_style="bold")
    for name in ("task", "tokens", "policy", *kinds):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for row in rows:
        table.add_row(row["task"], f"{row['length']:,}", row["policy"],
                      *(_share(row["by_kind"].get(kind)) for kind in kinds))
    return table


def _counts(verdicts: dict | None) -> list[str]:
    """The made-up and bound-wrong answers of a row, as counts."""
    return ["n/a", "n/a"] if verdicts is None else [str(verdicts["made_up"]), str(verdicts["bound_wrong"])]


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def save_config_beside(result: BenchResult, path: Path) -> Path:
    """Write the resolved config as PATH's name + .config.json, next to the result it belongs to."""
    beside = path.with_name(path.name + ".config.json")
    beside.write_text(json.dumps(result.config, indent=2) + "\n")
    return beside


def write_csv(result: BenchResult, path: str | Path) -> None:
    path = Path(path)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(result.rows)
    save_config_beside(result, path)


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SettingError("{plot} needs matplotlib: pip install matplotlib") from None
    return plt


def write_plot(result: BenchResult, path: str | Path) -> None:
    """Accuracy and peak memory against context length, one line per policy (and task, when several); for the
    niah task, the needle test's heatmap instead (`write_heatmap`)."""
    if any(row["task"] == "niah" for row in result.rows):
        write_heatmap(result, path)
        return
    plt = pyplot()
    path = Path(path)
    figure, (accuracy_axis, memory_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    tasks = sorted({row["task"] for row in result.rows})
    for task in tasks:
        for policy in dict.fromkeys(row["policy"] for row in result.rows):
            done = [r for r in result.rows if r["task"] == task and r["policy"] == policy and not r["skipped"]]
            if not done:
                continue
            label = policy if len(tasks) == 1 else f"{policy} ({task})"
            lengths = [r["length"] for r in done]
            if result.config["accuracy_meaningful"]:
                accuracy_axis.plot(lengths, [r["accuracy"] for r in done], marker="o", label=label)
            memory_axis.plot(lengths, [r["peak_bytes"] / 2**20 for r in done], marker="o", label=label)
    accuracy_axis.set(xscale="log", xlabel="context length (tokens)", ylabel="exact match", ylim=(-0.03, 1.03),
                      title="accuracy" if result.config["accuracy_meaningful"] else "accuracy: n/a (random weights)")
    memory_axis.set(xscale="log", xlabel="context length (tokens)", ylabel="peak memory (MiB)", title="peak memory")
    for axis in (accuracy_axis, memory_axis):
        axis.grid(alpha=0.3)
        if axis.lines:
            axis.legend(fontsize="small")
    figure.suptitle(result.config["model_name"] or "")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    save_config_beside(result, path)


def write_heatmap(result: BenchResult, path: str | Path) -> None:
    """The needle test's familiar picture: needle depth (rows, 0% at the top) by document length (columns), each
    cell coloured by the share of right answers, one panel per policy."""
    plt = pyplot()
    rows = [row for row in result.rows if row["task"] == "niah"]
    policies = list(dict.fromkeys(row["policy"] for row in rows))
    lengths = sorted({row["length"] for row in rows})
    depths = sorted({float(d) for row in rows for d in (row["by_depth"] or {})}) or [0.0]
    figure, axes = plt.subplots(1, len(policies), figsize=(2.2 + (1.4 + 0.7 * len(lengths)) * len(policies), 5),
                                squeeze=False, layout="constrained")
    for index, (axis, policy) in enumerate(zip(axes[0], policies)):
        grid = [[float("nan")] * len(lengths) for _ in depths]
        for row in rows:
            if row["policy"] == policy and row["by_depth"]:
                for depth, score in row["by_depth"].items():
                    grid[depths.index(float(depth))][lengths.index(row["length"])] = score
        image = axis.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
        axis.set_xticks(range(len(lengths)), [f"{n / 1024:.0f}K" if n >= 1024 else str(n) for n in lengths])
        axis.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        axis.set(title=policy, xlabel="tokens", ylabel="needle depth" if index == 0 else None)
    figure.colorbar(image, ax=axes[0].tolist(), label="right answers")
    figure.suptitle(f"needle in a haystack: {(result.config['model_name'] or '').split(' (')[0]}")
    figure.savefig(Path(path), dpi=120)
    plt.close(figure)
    save_config_beside(result, Path(path))
