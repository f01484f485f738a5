"""Rendering results for people: Rich tables and a progress bar, on the consoles the CLI hands in."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from locret_cli.api import AskResult


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


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
