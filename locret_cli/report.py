"""Rendering results for people: Rich tables and a progress bar, on the consoles the CLI hands in."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from locret_cli.api import AskResult
from locret_cli.measure import human_bytes


def cost_table(result: AskResult) -> Table:
    """What the answer cost: document, cache, memory and speed."""
    table = Table(title="What it cost", show_header=True, header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    s = result.settings
    pages = "-" if result.pages is None else str(result.pages)
    saved = result.full_cache_bytes / result.cache_peak_bytes if result.cache_peak_bytes else 0
    decode = "-" if result.decode_tokens_per_s is None else f"{result.decode_tokens_per_s:,.1f}"
    rows = [
        ("model", result.model),
        ("document tokens / pages", f"{result.document_tokens:,} / {pages}"),
        ("policy, positions", f"{result.policy}, {s.positions}"),
        ("budget / chunk / stabilizers", f"{s.budget:,} / {s.chunk_size:,} / {s.stabilizers:,}"),
        ("tokens kept in the cache (per head)", f"{result.cache_kept_tokens:,}"),
        ("KV cache peak tokens (per head)", f"{result.cache_peak_tokens:,}"),
        ("KV cache peak", human_bytes(result.cache_peak_bytes)),
        ("full cache would need", f"{human_bytes(result.full_cache_bytes)} ({saved:,.1f}x)"),
        (f"peak memory ({result.memory_device})", human_bytes(result.memory_peak_bytes)),
        ("prefill tokens/s", f"{result.prefill_tokens_per_s:,.1f}"),
        ("decode tokens/s", decode),
        ("time to first token", f"{result.time_to_first_token_s:.2f} s"),
        ("total", f"{result.total_s:.2f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


class DocumentProgress:
    """A Rich progress bar over pages or bytes, showing tokens read and tokens/s; a context manager."""

    def __init__(self, console: Console, unit: str, total: int | None, enabled: bool = True):
        self.unit = unit
        self.bar = Progress(
            TextColumn("[bold]reading"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[where]}"),
            TextColumn("{task.fields[tokens]:,} tokens, {task.fields[rate]:,.0f} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=not enabled,
            transient=True,
        )
        self.task = self.bar.add_task("read", total=total, where="", tokens=0, rate=0.0)

    def __enter__(self) -> "DocumentProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def update(self, event) -> None:
        elapsed = self.bar.tasks[0].elapsed or 1e-9
        if self.unit == "pages" and event.last_page is not None:
            where = f"page {event.last_page}"
        else:
            where = human_bytes(event.units_done)
        self.bar.update(self.task, completed=event.units_done, where=where, tokens=event.tokens,
                        rate=event.tokens / elapsed)


def train_table(summary, out: str) -> Table:
    """What training cost and what it reached."""
    table = Table(title=f"Heads saved to {out}", header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    layers = ", ".join(f"{a:.2f}" for a in summary.heldout_per_layer)
    for name, value in [
        ("steps", f"{summary.steps:,}"),
        ("examples (train / held out)", f"{summary.train_examples:,} / {summary.heldout_examples:,}"),
        ("training time", f"{summary.seconds:,.1f} s"),
        (f"peak memory ({summary.peak_device})", human_bytes(summary.peak_bytes)),
        ("final loss (SmoothL1 / smoothness)", f"{summary.final_loss:.4f} / {summary.final_smooth:.4f}"),
        ("held-out top-10% overlap", f"{summary.heldout_accuracy:.3f}"),
        ("per layer", layers),
    ]:
        table.add_row(name, value)
    return table


class TrainProgress:
    """Two phases on one Rich bar: computing labels, then training steps with loss, accuracy and tokens/s."""

    def __init__(self, console: Console, steps: int):
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=True,
        )
        self.labels_task = self.bar.add_task("labels", total=None, info="")
        self.steps_task = self.bar.add_task("training", total=steps, info="", visible=False)

    def __enter__(self) -> "TrainProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def labels(self, done: int, total: int) -> None:
        self.bar.update(self.labels_task, completed=done, total=total, info=f"{done}/{total} examples")

    def step(self, report) -> None:
        self.bar.update(self.steps_task, visible=True, completed=report.step,
                        info=f"loss {report.loss:.4f} smooth {report.smooth:.4f} acc {report.accuracy:.3f} "
                             f"{report.tokens_per_s:,.0f} tok/s")
