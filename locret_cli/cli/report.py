"""Rendering results for people: Rich tables and progress bars, on the consoles the CLI hands in. A table's strings
(names and questions from the input among them) print as written on those consoles (`app.plain_console`: no markup);
the progress bars' columns read markup, and show only what locret makes (counts, page numbers, phases)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from locret_cli.units import human_bytes

if TYPE_CHECKING:
    from locret_cli.api.answer import AskResult
    from locret_cli.api.reading import Reading
    from locret_cli.api.saved_context import SavedContext
    from locret_cli.inputs.sources import Source

ROUTE_NAMES = {"bounded-cache": "the bounded cache", "windows": "re-read windows"}  # `api/routes.py`


def kind_rows(by_kind: dict | None) -> list[tuple[str, str]]:
    """For a model with sliding layers, each kind's cache peak against its full cache."""
    return [(f"  {kind} layers ({k['layers']}): peak / full", f"{human_bytes(k['peak_bytes'])} / "
             f"{human_bytes(k['full_cache_bytes'])}") for kind, k in (by_kind or {}).items()]


def cost_table(result: AskResult) -> Table:
    """What the answer cost: document, cache, memory and speed."""
    table = Table(title="What it cost", show_header=True, header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    s, cache, speed = result.settings, result.kv_cache, result.speed
    pages = "-" if result.document.pages is None else str(result.document.pages)
    saved = cache.full_cache_bytes / cache.peak_bytes if cache.peak_bytes else 0
    decode = "-" if speed.decode_tokens_per_s is None else f"{speed.decode_tokens_per_s:,.1f}"
    loaded_from = result.context.loaded_from
    first = ("loading " + loaded_from, f"{speed.read_s:.3f} s") if loaded_from else \
        ("reading the document" if cache.holds_document else "tokenizing the document", f"{speed.read_s:.2f} s")
    kept = f"{cache.kept_tokens:,}" if cache.holds_document else \
        "- (bounded read not run: the answer came from the re-read window)"
    route = ROUTE_NAMES[result.route]
    if result.route == "bounded-cache" and result.answering.reread:
        route += " (the windows' answer named nothing the document holds)" if result.windows else \
            " (no window located)"
    route += f", read with the reader {result.reader}" if result.reader else ""
    rows = [
        ("model", result.model),
        ("compute", speed.compute or "-"),
        ("document tokens / pages", f"{result.document.tokens:,} / {pages}"),
        ("policy, positions", f"{result.policy}, {s.positions}" + (f", spans of {s.span}" if s.span > 1 else "")),
        ("read", read_mode(result.read_for)),
        ("answered from", route),
        ("budget / chunk / stabilizers", f"{s.budget:,} / {s.chunk_size:,} / {s.stabilizers:,}"),
        ("tokens kept in the cache (per head)", kept),
        *([(f"lazy prefill: tokens past layer {s.lazy_after}",
            f"{result.document.tokens - cache.lazy_pruned_tokens:,} of {result.document.tokens:,}")]
          if s.lazy_after else []),
        ("KV cache peak tokens (per head)", f"{cache.peak_tokens:,}"),
        ("KV cache peak", human_bytes(cache.peak_bytes) + (f" ({s.kv_bits}-bit)" if s.kv_bits < 16 else "")),
        ("full cache would need", f"{human_bytes(cache.full_cache_bytes)} ({saved:,.1f}x)"),
        *kind_rows(cache.by_kind),
        (f"peak memory ({result.memory.device})", human_bytes(result.memory.peak_bytes)),
        ("prefill tokens/s", f"{speed.prefill_tokens_per_s:,.1f}"),
        ("decode tokens/s", decode),
        first,
        ("answering", f"{speed.answer_s:.2f} s"),
        ("time to first token", f"{speed.time_to_first_token_s:.2f} s"),
        ("total", f"{speed.total_s:.2f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def grounding_warning(result: AskResult, prefix: str = "") -> Text | None:
    """The warning for stderr when the answer's content is not in the document as written, or was withheld (its
    text never read as markup); else None. `prefix` (the question, when there are several) starts the line."""
    from locret_cli.api.answer_checks import said_unanswered

    checked = result.grounding
    verdict, withheld, restated_from = checked.verdict, checked.withheld, checked.restated_from
    if verdict is not None and verdict.grounded and restated_from is not None and withheld is None:
        return Text.assemble(("note: ", "dim"), prefix + f"restated in the question's words; the model answered "
                             f"{restated_from!r}")
    if verdict is None or (verdict.grounded and withheld is None):
        return None
    missing = ", ".join(repr(text) for text in verdict.missing()) or "its content"
    if withheld is not None and said_unanswered(checked.answerable, result.answering):
        line = f"withheld: the model answered {withheld!r}, but said the text it read does not answer the question " \
               f"(yes {checked.answerable:.2f}, under --answerable-below {result.answering.answerable_below:g})"
    elif withheld is not None:
        line = f"withheld: the model answered {withheld!r}; the document does not hold {missing}"
    else:
        line = f"not in the document as written: {missing} (grounding: {verdict.status}; --strict withholds such " \
               "answers)"
    return Text.assemble(("warning: ", "yellow"), prefix + line)


def read_mode(read_for) -> str:
    """How the document was read: for no question, or steered by the questions given before the read."""
    if not read_for:
        return "question-agnostic"
    return f"for the question{'s' if len(read_for) > 1 else ''} asked ({len(read_for)})"


def format_sources(sources: list[Source]) -> str:
    """'p. 37 (holds the answer, 0.61), p. 112 (0.22)': each unit's share of the answer's attention, and whether its
    text holds the answer's content."""
    return ", ".join(f"{s.label()} ({'holds the answer, ' if s.holds_answer else ''}{s.weight:.2f})" for s in sources)


def sources_line(sources: list[Source], reread=None) -> str:
    """'sources: p. 37 (0.61), p. 112 (0.22)', and the windows read again, if any: '; re-read p. 36-37, p. 112'."""
    line = "sources: " + (format_sources(sources) if sources else "-")
    return line + ("; re-read " + ", ".join(w.label for w in reread) if reread else "")


def answers_table(results: list[AskResult]) -> Table:
    """One row per question: the answer and the pages it drew on."""
    table = Table(title="Answers", header_style="bold", show_lines=True)
    for name in ("#", "question", "answer", "sources"):
        table.add_column(name, overflow="fold")
    for i, r in enumerate(results, 1):
        cited = format_sources(r.sources) if r.sources else "-"
        table.add_row(str(i), r.question, r.answer, cited)
    return table


def multi_cost_table(results: list[AskResult]) -> Table:
    """One read (or load), then each answer's time: what reading once saved."""
    first = results[0]
    table = Table(title="What it cost", header_style="bold")
    table.add_column("step")
    table.add_column("time", justify="right")
    table.add_column("share of reading the document", justify="right")
    doc, last = first.document, results[-1]
    how = "reading" if last.kv_cache.holds_document else "tokenizing (no answer needed the bounded read)"
    loaded_from = first.context.loaded_from
    table.add_row(f"{how} {doc.tokens:,} tokens" + (" (earlier, saved)" if loaded_from else ""),
                  f"{doc.read_s:.2f} s", "")
    if loaded_from:
        load_s = first.speed.read_s
        table.add_row(f"loading {loaded_from}", f"{load_s:.3f} s", f"{load_s / doc.read_s:.1%}")
    for i, r in enumerate(results, 1):
        table.add_row(f"answer {i}", f"{r.speed.answer_s:.3f} s", f"{r.speed.answer_s / first.document.read_s:.1%}")
    table.add_row("total", f"{last.speed.read_s + sum(r.speed.answer_s for r in results):.2f} s", "")
    return table


def saved_table(reading: Reading, saved: SavedContext) -> Table:
    """What `locret read` wrote and what reading cost."""
    table = Table(title=f"Saved {saved.path}", header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    s, doc = reading.settings, reading.document
    rows = [
        ("model", reading.model_name),
        ("document tokens / pages", f"{doc.tokens:,} / {'-' if doc.pages is None else doc.pages}"),
        ("policy, budget / chunk / stabilizers",
         f"{reading.settings.policy}, {s.budget:,} / {s.chunk_size:,} / {s.stabilizers:,}"),
        ("read", read_mode(reading.read_for)),
        ("entries kept per head", f"{saved.entries:,}"),
        ("file size", human_bytes(saved.size_bytes)),
        ("bytes per entry and head", f"{saved.bytes_per_entry:,.1f}"),
        ("reading the document", f"{reading.read_s:.2f} s ({doc.tokens / reading.read_s:,.0f} tok/s)"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


class DocumentProgress:
    """A Rich progress bar over a document's pages or bytes, showing tokens read (or only tokenized, for a read left
    pending) and tokens/s. It opens at the first event, sized by it, so a caller can hand `update` to a step that may
    not read at all; it closes at `close()` (before an answer's tokens are shown) or at the end of the with block."""

    def __init__(self, console: Console, enabled: bool = True):
        self.bar = Progress(
            TextColumn("[bold]{task.fields[phase]}"),
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
        self.task = None

    def __enter__(self) -> "DocumentProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.bar.stop()

    def update(self, event) -> None:
        if self.task is None:
            self.task = self.bar.add_task("read", total=event.units_total, phase="reading", where="", tokens=0,
                                          rate=0.0)
            self.bar.start()
        elapsed = self.bar.tasks[0].elapsed or 1e-9
        if event.unit == "pages" and event.last_page is not None:
            where = f"page {event.last_page}"
        else:
            where = human_bytes(event.units_done)
        self.bar.update(self.task, completed=event.units_done, where=where, tokens=event.tokens,
                        rate=event.tokens / elapsed, phase="reading" if event.reading else "tokenizing")


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
    """Training steps on one Rich bar, with loss, accuracy and tokens/s."""

    def __init__(self, console: Console, steps: int):
        self.bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, transient=True,
        )
        self.steps_task = self.bar.add_task("training", total=steps, info="")

    def __enter__(self) -> "TrainProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def step(self, report) -> None:
        self.bar.update(self.steps_task, completed=report.step,
                        info=f"loss {report.loss:.4f} smooth {report.smooth:.4f} acc {report.accuracy:.3f} "
                             f"{report.tokens_per_s:,.0f} tok/s")


class BatchBar:
    """A Rich bar over a batch's documents, with questions, tokens/s, ETA and failures; a context manager."""

    def __init__(self, console: Console, enabled: bool = True):
        self.bar = Progress(
            TextColumn("[bold]batch"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f} documents"),
            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=console, disable=not enabled, transient=True,
        )
        self.task = self.bar.add_task("batch", total=0, info="")

    def __enter__(self) -> "BatchBar":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def update(self, progress) -> None:
        tokens = progress.tokens_read + sum(progress.tokens_in_flight.values())
        rate = tokens / progress.elapsed_s if progress.elapsed_s else 0.0
        failed = f", [red]{progress.failed} failed[/]" if progress.failed else ""
        failed += f", {progress.retries} retried" if progress.retries else ""
        self.bar.update(self.task, total=progress.documents, completed=progress.documents_done,
                        info=f"{progress.questions_done:,}/{progress.questions:,} questions, {rate:,.0f} tok/s{failed}")


def batch_table(summary, out: str) -> Table:
    """What a batch did: rows answered, failed and skipped, and its throughput."""
    table = Table(title=f"Answers in {out}", header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    where = f"{summary.pool}, {summary.workers} workers" if summary.workers else summary.pool
    for name, value in [
        ("documents read", f"{summary.documents:,}"),
        ("questions answered", f"{summary.answered:,}"),
        ("answers not in the document", f"{summary.ungrounded:,}"),
        ("failed (error rows)", f"{summary.failed:,}"),
        ("skipped (already answered)", f"{summary.skipped:,}"),
        ("workers retried", f"{summary.retries:,}"),
        ("tokens read", f"{summary.tokens_read:,}"),
        ("wall time", f"{summary.wall_s:,.1f} s ({where})"),
        ("throughput", f"{summary.tokens_per_s:,.0f} tok/s, {summary.documents_per_hour:,.0f} documents/hour"),
    ]:
        table.add_row(name, value)
    return table
