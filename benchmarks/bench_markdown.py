"""Turn `locret bench --json` documents into the markdown tables of docs/measurements/ (shapes.md, policy-accuracy.md).

    python benchmarks/bench_markdown.py speed runs/bench/smollm2-135m-*.json
    python benchmarks/bench_markdown.py accuracy runs/bench/embedded.json
    python benchmarks/bench_markdown.py heatmap docs/images/niah-smollm2.png runs/niah/smollm2-*.json

`heatmap` joins the niah rows of runs made one length at a time (one model) into one needle-test heatmap, then
prints their accuracy table as `accuracy` does.
"""

from __future__ import annotations

import json
import sys

from locret_cli.bench.output import write_heatmap
from locret_cli.bench.suite import BenchResult


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def speed_table(rows: list[dict]) -> list[str]:
    out = ["| policy | tokens | prefill tok/s | decode tok/s | time to first token | KV cache peak | peak RSS | % roofline |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["policy"], r["length"])):
        if r["skipped"]:
            out.append(f"| {r['policy']} | {r['length']:,} | skipped: {r['skipped']} | | | | | |")
            continue
        decode = "-" if r["decode_tokens_per_s"] is None else f"{r['decode_tokens_per_s']:.1f}"
        out.append(f"| {r['policy']} | {r['length']:,} | {r['prefill_tokens_per_s']:,.0f} | {decode} | "
                   f"{r['time_to_first_token_s']:,.1f} s | {mib(r['kv_peak_bytes'])} | {mib(r['peak_bytes'])} | "
                   f"{100 * r['roofline_s'] / r['measured_s']:.0f}% |")
    return out


def accuracy_table(rows: list[dict]) -> list[str]:
    """Exact match per policy (rows) and length (columns), one table per task."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        chosen = [r for r in rows if r["task"] == task]
        lengths = sorted({r["length"] for r in chosen})
        out += [f"**{task}**", "", "| policy | " + " | ".join(f"{n:,}" for n in lengths) + " |",
                "|---|" + "---:|" * len(lengths)]
        for policy in dict.fromkeys(r["policy"] for r in chosen):
            cells = {r["length"]: r for r in chosen if r["policy"] == policy}
            shown = []
            for n in lengths:
                r = cells.get(n)
                score = None if r is None or r["skipped"] else r["right_accuracy" if task == "niah" else "accuracy"]
                shown.append("-" if r is None else "skipped" if r["skipped"] else f"{100 * score:.0f}%")
            out.append(f"| {policy} | " + " | ".join(shown) + " |")
        out.append("")
    return out


def main() -> None:
    kind, paths = sys.argv[1], sys.argv[2:]
    plot = paths.pop(0) if kind == "heatmap" else None
    documents = [json.load(open(p)) for p in paths]
    rows = [row for d in documents for row in d["rows"]]
    config = documents[0]["config"]
    if plot:
        if len({d["config"]["model_name"] for d in documents}) != 1:
            sys.exit("heatmap: the runs are of different models")
        write_heatmap(BenchResult(config, sorted(rows, key=lambda r: r["length"])), plot)
    print(f"{config['model_name']}; settings {config['settings']}; matmul {config['matmul_flops_per_s'] / 1e12:.2f} "
          f"TFLOP/s; {config['threads']} threads; torch {config['torch']}\n")
    print("\n".join(speed_table(rows) if kind == "speed" else accuracy_table(rows)))


if __name__ == "__main__":
    main()
