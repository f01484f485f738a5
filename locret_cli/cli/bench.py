"""`locret bench`: every policy on the same documents, side by side."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console

from locret_cli.cli import option_groups
from locret_cli.cli.app import app, domain_errors
from locret_cli.core.settings import POLICY_NAMES
from locret_cli.files import refuse_existing


@app.command()
@domain_errors
def bench(
    model: Annotated[Optional[str], typer.Option(help="Hub id, local directory, .gguf file, smollm2 (SmolLM2-135M-Instruct) or gemma3-270m (Gemma 3 270M base), with shipped heads. Default: the embedded model.")] = None,
    arch: Annotated[Optional[str], typer.Option(help="A shape preset with random weights: smollm2-135m, qwen2.5-0.5b, qwen2.5-1.5b, llama-3.2-1b, llama-3.1-8b, phi-3-mini-128k, gemma3-1b, gemma3-4b or gemma3-12b (each gemma3 also as -global: every layer global). Speed and memory only.")] = None,
    heads: Annotated[Optional[str], typer.Option(help="Retaining heads for --model (the locret policy needs them).")] = None,
    reader: option_groups.Reader = None,
    policies: Annotated[str, typer.Option(help="Comma-separated rows: a policy, optionally with settings (or a reader) of its own, as in locret:reread=0, locret:span=64:stabilizers=2048 or locret:reread=0:reader=off.")] = ",".join(POLICY_NAMES),
    lengths: Annotated[str, typer.Option(help="Context lengths in tokens; k = 1024.")] = "4k,16k",
    tasks: Annotated[str, typer.Option(help="needle (pass key at depths 0-100%), facts, niah (the Paul Graham essays), kinds (one question of each kind per document, in the essays) and/or natural (questions as users ask them over real documents of their own length; natural-validation: the half to tune on).")] = "needle",
    data: Annotated[Optional[str], typer.Option(help="Your own JSONL of context (text or a .pdf/.txt path), question, answer. Replaces --tasks and --lengths.")] = None,
    samples: Annotated[int, typer.Option(help="Documents per cell (needle depths are spread over them).")] = 3,
    repeat: Annotated[int, typer.Option(help="Runs per cell, each in a fresh process; figures are medians.")] = 1,
    budget: Annotated[Optional[int], typer.Option(help="Cache entries kept per KV head. Default: the model's recorded default, else 6000.")] = None,
    chunk_size: Annotated[Optional[int], typer.Option(help="Tokens prefilled per step.")] = None,
    stabilizers: Annotated[Optional[int], typer.Option(help="Most recent entries always kept.")] = None,
    positions: Annotated[str, typer.Option(help="compact or original.")] = "compact",
    max_new_tokens: Annotated[Optional[int], typer.Option(help="Longest answer, in tokens. Default: 16, and 64 for niah, whose answer is a sentence.")] = None,
    memory_limit: Annotated[Optional[float], typer.Option(help="GiB the full policy may use, weights included. Default: what is free.")] = None,
    device: option_groups.Device = "auto",
    dtype: option_groups.Dtype = "auto",
    load_4bit: option_groups.Load4bit = False,
    load_8bit: option_groups.Load8bit = False,
    compile_decode: option_groups.CompileDecode = False,
    max_memory: option_groups.MaxMemory = None,
    trust_remote_code: option_groups.TrustRemoteCode = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document {config, rows} on stdout and nothing else.")] = False,
    csv_path: Annotated[Optional[str], typer.Option("--csv", help="Also write the rows as CSV here (config beside it).")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Also plot accuracy and peak memory against length to this PNG.")] = None,
) -> None:
    """Run the same documents and questions through each policy: accuracy, memory and speed, side by side."""
    from locret_cli.bench import BenchConfig, parse_lengths, run_bench
    from locret_cli.bench.output import bench_table, kinds_table, write_csv, write_plot

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for target in (csv_path, plot):
        if target:
            refuse_existing(target)
    config = BenchConfig(
        model=model, arch=arch, heads=heads, reader=reader, policies=[p.strip() for p in policies.split(",") if p.strip()],
        lengths=parse_lengths(lengths), tasks=[t.strip() for t in tasks.split(",") if t.strip()], data=data,
        samples=samples, repeat=repeat, budget=budget, chunk_size=chunk_size, stabilizers=stabilizers,
        positions=positions, max_new_tokens=max_new_tokens, device=device, dtype=dtype, load_4bit=load_4bit,
        load_8bit=load_8bit, compile_decode=compile_decode, max_memory=max_memory, trust_remote_code=trust_remote_code, memory_limit_gb=memory_limit,
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
        out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        out.print(bench_table(result))
        if (by_kind := kinds_table(result)) is not None:
            out.print(by_kind)
