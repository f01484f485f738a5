"""`locret train-reader`: fit a reader that answers from a model's own bounded caches."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from locret_cli.cli.app import app, domain_errors, plain_console, warn
from locret_cli.cli.option_groups import MODEL, Overwrite, Resume, SaveEvery, option_groups, setting_option
from locret_cli.errors import SettingError
from locret_cli.models.library_logs import quiet_libraries
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import DEFAULT_POLICY, ReadSettings


@app.command("train-reader")
@domain_errors
@option_groups(MODEL)
def train_reader(
    data: Annotated[str, typer.Option(help="JSONL of documents and their questions: {\"document\": text, "
                                           "\"questions\": [{\"question\": q, \"answer\": a}, ...]} per line; "
                                           "a question may name its \"value\", the document's words it asks for.")],
    out: Annotated[str, typer.Option(help="Directory for the reader, its checkpoints and the saved reads.")],
    steps: Annotated[int, typer.Option(help="Optimiser steps (one question each).")] = 2000,
    rank: Annotated[int, typer.Option(help="Rank of each low-rank update.")] = 8,
    alpha: Annotated[float, typer.Option(help="Scale of the updates: alpha / rank.")] = 16.0,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 1e-3,
    kept_min: Annotated[float, typer.Option(help="Smallest share of a document its read keeps.")] = 0.03,
    kept_max: Annotated[float, typer.Option(help="Largest share of a document its read keeps.")] = 0.25,
    uncut_share: Annotated[float, typer.Option(help="Share of documents read whole, with nothing evicted.")] = 0.1,
    min_kept_share: Annotated[float, typer.Option(
        help="Skip a question whose value its read keeps in fewer than this share of (layer, KV head) pairs.")] = 0.0,
    save_every: SaveEvery = 100,
    seed: Annotated[int, typer.Option(help="Seed for the reader's start, budgets and question order.")] = 0,
    resume: Resume = False,
    overwrite: Overwrite = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON document on stdout.")] = False,
    policy: setting_option(ReadSettings, "policy") = None,
    *,
    spec: ModelSpec,
) -> None:
    """Train a reader for MODEL and its heads on DATA and save it in OUT. Each document is read once with the
    model's heads and recorded settings, at a budget that keeps between --kept-min and --kept-max of it; the
    reader then learns to answer each question from that bounded cache."""
    from locret_cli.api import load_session
    from locret_cli.training import ReaderConfig
    from locret_cli.training import train_reader as fit

    if spec.reader is not None:
        raise SettingError("{reader} chooses the reader answers are read with; train-reader trains one in {out}")
    if not 0 < kept_min <= kept_max <= 1:
        raise SettingError("{kept_min} and {kept_max} must satisfy 0 < min <= max <= 1")
    if rank < 1 or steps < 1 or save_every < 1 or not 0 <= uncut_share <= 1 or not 0 <= min_kept_share <= 1:
        raise SettingError("{rank}, {steps} and {save_every} must be positive, {uncut_share} and {min_kept_share} "
                           "between 0 and 1")
    quiet_libraries()
    err = plain_console(stderr=True)
    config = ReaderConfig(steps=steps, rank=rank, alpha=alpha, lr=lr, kept_share=(kept_min, kept_max),
                          uncut_share=uncut_share, save_every=save_every, seed=seed, min_kept_share=min_kept_share)
    with err.status(Text(f"loading {spec.model or 'the embedded model'}"), spinner="dots"):
        session = load_session(replace(spec, reader="off"), reads_with=policy or DEFAULT_POLICY)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                   TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                   console=err, transient=True)
    reads, training = bar.add_task("reading", total=None, info=""), bar.add_task("training", total=steps, info="")
    with bar:
        summary = fit(session, data, out, config, resume=resume, overwrite=overwrite,
                      warn=lambda message: warn(err, message),
                      on_read=lambda done, total: bar.update(reads, completed=done, total=total),
                      on_step=lambda r: bar.update(training, completed=r.step, info=f"loss {r.loss:.4f}"),
                      read={} if policy is None else {"policy": policy})
    if as_json:
        sys.stdout.write(json.dumps(asdict(summary)) + "\n")
    else:
        skipped = f", {summary.skipped} questions skipped (value barely kept)" if summary.skipped else ""
        err.print(f"reader saved in {out}: {summary.steps} steps in {summary.seconds:.0f} s (reads {summary.read_s:.0f}"
                  f" s), loss over the last steps {summary.final_loss:.4f}{skipped}")
