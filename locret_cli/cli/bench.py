"""`locret bench`: every policy on the same documents, side by side."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer
from rich.text import Text

from locret_cli.cli import option_groups
from locret_cli.cli.app import app, domain_errors, plain_console
from locret_cli.files import refuse_existing
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import POLICY_NAMES


@app.command()
@domain_errors
@option_groups.option_groups(option_groups.SHAPES, option_groups.SETTINGS)
def bench(
    policies: Annotated[str, typer.Option(help="Comma-separated rows: a policy, optionally with settings (or a reader) of its own, as in locret:reread=0, locret:span=64:stabilizers=2048 or locret:reread=0:reader=off.")] = ",".join(POLICY_NAMES),
    lengths: Annotated[str, typer.Option(help="Context lengths in tokens; k = 1024.")] = "4k,16k",
    tasks: Annotated[str, typer.Option(help="needle (pass key at depths 0-100%), facts, niah (the Paul Graham essays), kinds (one question of each kind per document, in the essays) and/or natural (questions as users ask them over real documents of their own length; natural-validation: the half to tune on). Each task's answers are 16 tokens long at most unless --max-new-tokens says otherwise; niah's and natural's, whose answers are sentences, longer.")] = "needle",
    baselines: Annotated[str, typer.Option(help="Comma-separated rows read instead with a full cache, one reading per question, after the policies' rows: rag-minilm and rag-bm25 (the document's 200-word passages ranked against the question by all-MiniLM-L6-v2 or BM25: pip install 'locret-cli\\[rag]'), passage-oracle (the window around the answer: the reading ceiling); a row may cap its own reading, as in passage-oracle:tokens=3072.")] = "",
    rag_tokens: Annotated[int, typer.Option(help="The most tokens each baseline row reads per question.")] = 1024,
    data: Annotated[Optional[str], typer.Option(help="Your own JSONL of context (text or a .pdf/.txt path), question, answer. Replaces --tasks and --lengths.")] = None,
    samples: Annotated[int, typer.Option(help="Documents per cell (needle depths are spread over them).")] = 3,
    repeat: Annotated[int, typer.Option(help="Runs per cell, each in a fresh process; figures are medians.")] = 1,
    memory_limit: Annotated[Optional[float], typer.Option(help="GiB the full policy may use, weights included. Default: what is free.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document {config, rows} on stdout and nothing else.")] = False,
    csv_path: Annotated[Optional[str], typer.Option("--csv", help="Also write the rows as CSV here (config beside it).")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Also plot accuracy and peak memory against length to this PNG.")] = None,
    *,
    spec: ModelSpec,
    settings: dict,
) -> None:
    """Run the same documents and questions through each policy: accuracy, memory and speed, side by side."""
    from locret_cli.bench import BenchConfig, parse_lengths, run_bench
    from locret_cli.bench.output import bench_table, kinds_table, write_csv, write_plot

    err = plain_console(stderr=True)
    for target in (csv_path, plot):
        if target:
            refuse_existing(target)
    config = BenchConfig(spec, settings, policies=[p.strip() for p in policies.split(",") if p.strip()],
                         lengths=parse_lengths(lengths), tasks=[t.strip() for t in tasks.split(",") if t.strip()],
                         data=data, samples=samples, repeat=repeat, memory_limit_gb=memory_limit,
                         baselines=[b.strip() for b in baselines.split(",") if b.strip()],
                         rag_tokens=rag_tokens).checked()
    with err.status("measuring this machine's matmul rate", spinner="dots") as status:
        # each cell's label (its policy, as given) as Text: a status would read a string as markup
        result = run_bench(config, on_cell=lambda label, i, n: status.update(Text(f"cell {min(i + 1, n)}/{n}: "
                                                                                  f"{label}")))
    if csv_path:
        write_csv(result, csv_path)
    if plot:
        write_plot(result, plot)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
    else:
        out = plain_console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)
        out.print(bench_table(result))
        if (by_kind := kinds_table(result)) is not None:
            out.print(by_kind)
