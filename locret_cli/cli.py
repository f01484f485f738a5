"""The `locret` command line: parse, call the API, render. Nothing else lives here."""

from __future__ import annotations

import functools
import json
import logging
import sys
from contextlib import nullcontext
from typing import Annotated, Optional

import typer
from rich.console import Console

from locret_cli.errors import LocretError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Ask questions of documents far longer than a normal KV cache could hold (Locret, arXiv 2410.01805).",
)


@app.callback()
def _root() -> None:
    """Keeps `ask`, `train` and `bench` named subcommands."""


def quiet_libraries() -> None:
    """Our own progress and messages replace the libraries' bars and log lines on stderr."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def domain_errors(command):
    """Turn LocretError into one line on stderr and exit status 1; Ctrl-C into status 130."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LocretError as exc:
            Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {exc}", markup=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            Console(stderr=True).print("interrupted")
            raise typer.Exit(130) from None

    return wrapper


@app.command()
@domain_errors
def ask(
    source: Annotated[str, typer.Argument(help="A .pdf or text file, or - to read stdin.")],
    question: Annotated[str, typer.Argument(help="The question to answer from the document.")],
    model: Annotated[Optional[str], typer.Option(help="Hub id or local directory. Default: the embedded model.")] = None,
    heads: Annotated[Optional[str], typer.Option(help="Retaining heads: a locret heads dir or an official Locret checkpoint.")] = None,
    policy: Annotated[str, typer.Option(help="Eviction policy: locret, streaming, h2o, snapkv, random, knorm or full.")] = "locret",
    budget: Annotated[Optional[int], typer.Option(help="Cache entries kept per KV head. Default 6000, or the model's recorded default.")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(help="Tokens prefilled per step. Default 3072.")] = None,
    stabilizers: Annotated[Optional[int], typer.Option(help="Most recent entries always kept. Default 2500; clipped to budget/2 if it does not fit.")] = None,
    positions: Annotated[str, typer.Option(help="compact: renumber kept entries 0..n-1; original: keep true positions.")] = "compact",
    score_pool: Annotated[Optional[int], typer.Option(help="locret: each score becomes the best within this many neighbouring tokens (odd). Default 1, or the model's recorded default.")] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(help="Longest answer, in tokens. Default 256.")] = None,
    temperature: Annotated[float, typer.Option(help="0 decodes greedily.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass when temperature > 0.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed for sampling.")] = 0,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto (bf16 where fast), bf16, fp16 or fp32.")] = "auto",
    load_4bit: Annotated[bool, typer.Option("--load-4bit", help="Load weights in 4-bit nf4 (bitsandbytes).")] = False,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code. Off unless asked.")] = False,
    encoding: Annotated[Optional[str], typer.Option(help="Text encoding of the input. Default: UTF-8, or as its BOM says.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Run even when the estimated memory need exceeds what is free.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Print only the answer.")] = False,
) -> None:
    """Answer QUESTION from the document at SOURCE with a bounded KV cache."""
    from locret_cli.api import load_session
    from locret_cli.documents import open_document
    from locret_cli.report import DocumentProgress, cost_table

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    out = Console(highlight=False, soft_wrap=True)
    if source == "-" and sys.stdin.isatty():
        raise LocretError("SOURCE is -, but nothing is piped into stdin")

    def warn(message: str) -> None:
        err.print(f"[yellow]warning:[/] {message}")

    quiet_libraries()
    document = open_document(source, encoding=encoding)
    with err.status(f"loading {model or 'the embedded model'}", spinner="dots") if not quiet else nullcontext():
        session = load_session(model, heads, policy, device, dtype, load_4bit, trust_remote_code)
    if model is None and not quiet:
        warn(f"no --model given: using the {session.loaded.name}")
    settings = session.settings(
        warn, budget=budget, chunk_size=chunk_size, stabilizers=stabilizers, positions=positions,
        score_pool=score_pool, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
    )
    with DocumentProgress(err, document.unit, document.total_units, enabled=not quiet) as progress:
        result = session.ask(document, question, settings, on_progress=progress.update, force=force)
    for message in result.warnings:
        warn(message)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
        return
    out.print(result.answer, markup=False)
    if not result.answer and not quiet:
        warn("the model gave an empty answer (it stopped at once)")
    if not quiet:
        err.print(cost_table(result))


@app.command()
@domain_errors
def train(
    model: Annotated[str, typer.Option(help="Hub id or local directory of the (frozen) model.")],
    data: Annotated[str, typer.Option(help="JSONL of prompt/answer, or ShareGPT-style JSON conversations.")],
    out: Annotated[str, typer.Option(help="Directory for the trained heads and checkpoints.")],
    steps: Annotated[int, typer.Option(help="Optimiser steps (one example each).")] = 3000,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 5e-4,
    beta1: Annotated[float, typer.Option(help="AdamW beta1.")] = 0.9,
    beta2: Annotated[float, typer.Option(help="AdamW beta2.")] = 0.95,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay.")] = 0.01,
    warmup: Annotated[Optional[int], typer.Option(help="Linear warmup steps, then linear decay. Default 5% of steps.")] = None,
    clip_value: Annotated[float, typer.Option(help="Gradient value clipping.")] = 0.5,
    smooth_weight: Annotated[float, typer.Option(help="Weight α of the smoothness loss MSE(pred[k], pred[k-1]).")] = 0.0025,
    hidden: Annotated[int, typer.Option(help="Hidden width of each head.")] = 1024,
    max_len: Annotated[int, typer.Option(help="Prompts longer than this many tokens are cut in the middle.")] = 10240,
    save_every: Annotated[int, typer.Option(help="Checkpoint every N steps.")] = 500,
    eval_fraction: Annotated[float, typer.Option(help="Share of examples held out for the final accuracy.")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed for head initialisation and data order.")] = 0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in --out.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace heads already in --out.")] = False,
    label_cache: Annotated[Optional[str], typer.Option(help="Label cache directory. Default ~/.cache/locret/labels.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="Dtype of the frozen model: auto, bf16, fp16 or fp32.")] = "auto",
    load_4bit: Annotated[bool, typer.Option("--load-4bit", help="Load the frozen model in 4-bit nf4.")] = False,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON document on stdout.")] = False,
) -> None:
    """Train retaining heads for MODEL on prompt/answer DATA and save them in OUT."""
    from pathlib import Path

    from locret_cli.loading import load_model
    from locret_cli.report import TrainProgress, train_table
    from locret_cli.training import TrainConfig, train_heads

    quiet_libraries()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    config = TrainConfig(steps=steps, lr=lr, betas=(beta1, beta2), weight_decay=weight_decay, warmup=warmup,
                         clip_value=clip_value, smooth_weight=smooth_weight, hidden=hidden, save_every=save_every,
                         eval_fraction=eval_fraction, seed=seed)
    with err.status(f"loading {model}", spinner="dots"):
        loaded = load_model(model, device, dtype, load_4bit, trust_remote_code)
    with TrainProgress(err, steps) as progress:
        summary = train_heads(
            loaded, data, out, config, max_len=max_len, resume=resume, overwrite=overwrite,
            label_cache=Path(label_cache) if label_cache else None,
            warn=lambda m: err.print(f"[yellow]warning:[/] {m}"), on_labels=progress.labels, on_step=progress.step,
        )
    if as_json:
        from dataclasses import asdict

        sys.stdout.write(json.dumps(asdict(summary)) + "\n")
    else:
        err.print(train_table(summary, out))


@app.command()
@domain_errors
def bench(
    model: Annotated[Optional[str], typer.Option(help="Hub id or local directory. Default: the embedded model.")] = None,
    arch: Annotated[Optional[str], typer.Option(help="A shape preset with random weights: smollm2-135m, qwen2.5-0.5b, llama-3.2-1b, llama-3.1-8b or phi-3-mini-128k. Speed and memory only.")] = None,
    heads: Annotated[Optional[str], typer.Option(help="Retaining heads for --model (the locret policy needs them).")] = None,
    policies: Annotated[str, typer.Option(help="Comma-separated policies.")] = "locret,streaming,h2o,snapkv,random,knorm,full",
    lengths: Annotated[str, typer.Option(help="Context lengths in tokens; k = 1024.")] = "4k,16k",
    tasks: Annotated[str, typer.Option(help="needle (pass key at depths 0-100%) and/or facts.")] = "needle",
    data: Annotated[Optional[str], typer.Option(help="Your own JSONL of context (text or a .pdf/.txt path), question, answer. Replaces --tasks and --lengths.")] = None,
    samples: Annotated[int, typer.Option(help="Documents per cell (needle depths are spread over them).")] = 3,
    repeat: Annotated[int, typer.Option(help="Runs per cell, each in a fresh process; figures are medians.")] = 1,
    budget: Annotated[Optional[int], typer.Option(help="Cache entries kept per KV head. Default: the model's recorded default, else 6000.")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(help="Tokens prefilled per step.")] = None,
    stabilizers: Annotated[Optional[int], typer.Option(help="Most recent entries always kept.")] = None,
    positions: Annotated[str, typer.Option(help="compact or original.")] = "compact",
    max_new_tokens: Annotated[int, typer.Option(help="Longest answer, in tokens.")] = 16,
    memory_limit: Annotated[Optional[float], typer.Option(help="GiB the full policy may use, weights included. Default: what is free.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, bf16, fp16 or fp32.")] = "auto",
    load_4bit: Annotated[bool, typer.Option("--load-4bit", help="Load weights in 4-bit nf4 (bitsandbytes).")] = False,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document {config, rows} on stdout and nothing else.")] = False,
    csv_path: Annotated[Optional[str], typer.Option("--csv", help="Also write the rows as CSV here (config beside it).")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Also plot accuracy and peak memory against length to this PNG.")] = None,
) -> None:
    """Run the same documents and questions through each policy: accuracy, memory and speed, side by side."""
    from pathlib import Path

    from locret_cli.bench import BenchConfig, parse_lengths, run_bench
    from locret_cli.bench.output import bench_table, write_csv, write_plot

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for target in (csv_path, plot):
        if target and Path(target).exists():
            raise LocretError(f"{target} already exists; remove it or choose another path")
    config = BenchConfig(
        model=model, arch=arch, heads=heads, policies=[p.strip() for p in policies.split(",") if p.strip()],
        lengths=parse_lengths(lengths), tasks=[t.strip() for t in tasks.split(",") if t.strip()], data=data,
        samples=samples, repeat=repeat, budget=budget, chunk_size=chunk_size, stabilizers=stabilizers,
        positions=positions, max_new_tokens=max_new_tokens, device=device, dtype=dtype, load_4bit=load_4bit,
        trust_remote_code=trust_remote_code, memory_limit_gb=memory_limit,
    ).checked()
    with err.status("measuring this machine's matmul rate", spinner="dots") as status:
        result = run_bench(config, on_cell=lambda label, i, n: status.update(f"cell {min(i + 1, n)}/{n}: {label}"))
    if csv_path:
        write_csv(result, csv_path)
    if plot:
        write_plot(result, plot)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
    else:
        Console(highlight=False, width=None if sys.stdout.isatty() else 160).print(bench_table(result))


def main() -> None:
    app()
