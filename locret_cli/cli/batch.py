"""`locret batch`: the same questions of many documents, appended to a JSONL file that a rerun resumes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from locret_cli.cli import options
from locret_cli.cli.app import app, domain_errors, plain_console, warn
from locret_cli.cli.option_groups import ANSWERING, MODEL, OUTPUT_PANEL, READING, option_groups
from locret_cli.errors import LocretError
from locret_cli.models.spec import ModelSpec

EXIT_SOME_FAILED = 3


@app.command()
@domain_errors
@option_groups(MODEL, READING, ANSWERING)
def batch(
    inputs: Annotated[str, typer.Argument(help="A glob ('docs/*.pdf', quoted), a directory, or a JSONL of {\"source\": path, \"questions\": [...]}.")],
    out: Annotated[str, typer.Option("--out", help="The answers, one JSON row per document and question, appended as they come (.jsonl). Rerunning skips what it holds.")],
    questions_file: Annotated[Optional[str], typer.Option("--questions", help="Questions to ask of every document: one per line, or JSONL with a \"question\" key.")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Worker processes (or Ray actors), each loading the model once. Default: 2 processes on a CPU with 2 or more cores (fastest here: docs/batch.md), 1 on a GPU; with --ray, one actor per GPU or per --threads CPUs.")] = None,
    threads: Annotated[Optional[int], typer.Option(help="Torch threads per worker. Default: the cores divided among the local workers; 1 per Ray actor.")] = None,
    ray: Annotated[Optional[str], typer.Option("--ray", help="Run on Ray: auto (the running cluster), local (start one here) or an address. Needs the ray extra.")] = None,
    save_contexts: Annotated[Optional[str], typer.Option("--save-contexts", help="Keep each document's read cache as DIR/<name>-<hash>.locret; a rerun loads it instead of reading again.")] = None,
    sort: Annotated[bool, typer.Option("--sort", help="When done, rewrite --out in input order (rows are written in completion order).")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Ask again the questions whose rows in --out are errors (those rows are removed).")] = False,
    *,
    spec: ModelSpec,
    read: dict,
    answer: dict,
    no_sources: options.NoSources = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run's summary as one JSON document on stdout.", rich_help_panel=OUTPUT_PANEL)] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress bar and no summary table.", rich_help_panel=OUTPUT_PANEL)] = False,
) -> None:
    """Ask every document the same questions, each document read once; resumable, on local workers or Ray.

    Exits 0 when every question was answered, 3 when some rows are errors, 1 on bad input, 130 when interrupted."""
    from locret_cli.batch.answer_log import AnswerLog
    from locret_cli.batch.inputs import expand_inputs
    from locret_cli.batch.local_pool import LocalPool, default_workers, usable_cores
    from locret_cli.batch.scheduler import input_order, run_batch
    from locret_cli.batch.work import WorkerSpec
    from locret_cli.cli.report import BatchBar, batch_table

    err = plain_console(stderr=True)
    if save_contexts and not Path(save_contexts).is_dir():
        raise LocretError(f"--save-contexts {save_contexts} is not a directory")
    jobs = expand_inputs(inputs, questions_file, exclude=(out,))
    local_workers = workers or (None if ray else default_workers(spec.device))
    model_spec = spec.checked()
    worker = WorkerSpec(model_spec, read | answer, not no_sources,
                      str(Path(save_contexts).resolve()) if save_contexts else None,
                      threads or (None if ray else max(1, usable_cores() // local_workers)))
    if ray:
        from locret_cli.batch.ray_pool import RayPool

        pool = RayPool(ray, worker, workers)
    else:
        pool = LocalPool(worker, local_workers)
    with AnswerLog.open(out, worker.identity(), retry_failed) as log:
        if log.torn_bytes and not quiet:
            warn(err, f"{out} ended in a row cut short ({log.torn_bytes} bytes): it was dropped and its question is "
                      "asked again")
        try:
            with BatchBar(err, enabled=not quiet) as bar:
                summary = run_batch(jobs, log, pool, on_progress=bar.update)
        except KeyboardInterrupt:  # `domain_errors` says so and exits 130
            raise KeyboardInterrupt(f"interrupted: {out} holds {len(log.rows):,} rows; rerun the same command to "
                                    "resume") from None
        if sort:
            log.sort(input_order(jobs))
    if as_json:
        sys.stdout.write(json.dumps(summary.to_json()) + "\n")
    elif not quiet:
        err.print(batch_table(summary, out))
        for failure in summary.failures[:10]:
            err.print(f"failed: {failure}", style="red")
    if summary.failed:
        raise typer.Exit(EXIT_SOME_FAILED)
