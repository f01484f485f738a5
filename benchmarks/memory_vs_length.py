"""Peak memory of `locret ask` against document length, at a fixed budget: the cache must not grow.

    python benchmarks/memory_vs_length.py --lengths 8000,100000 --policies locret,full:8000

Builds a random-weights model of a real shape (default SmolLM2-135M) with a byte-level tokenizer, writes synthetic
documents of each length, and runs `locret ask --json` once per (policy, length) in a fresh process so each peak RSS
is clean. Prints a Markdown table. Accuracy is meaningless with random weights; memory and speed are real.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.random_model_dir import write_random_model
from locret_cli.bench.synthetic import paragraphs, passkey_fact


def write_document(path: Path, tokens: int) -> None:
    """About `tokens` bytes of filler (one token per byte) with a pass key halfway."""
    rng = random.Random(tokens)
    text, blocks = "", []
    while len(text) < tokens:
        blocks.extend(paragraphs(rng, 50))
        text = "\n\n".join(blocks)
    text = text[: tokens // 2] + "\n\n" + passkey_fact(rng).statement + "\n\n" + text[tokens // 2:]
    path.write_text(text[:tokens])


def run(model_dir: Path, document: Path, policy: str, args) -> dict:
    command = [sys.executable, "-m", "locret_cli", "ask", str(document), "What is the pass key?", "--json",
               "--model", str(model_dir), "--policy", policy, "--budget", str(args.budget),
               "--chunk-size", str(args.chunk_size), "--stabilizers", str(args.stabilizers),
               "--max-new-tokens", "16", "--dtype", args.dtype]
    if policy == "locret":
        command += ["--heads", str(model_dir / "heads")]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2-135m")
    parser.add_argument("--lengths", default="8000,100000")
    parser.add_argument("--policies", default="locret,full:8000",
                        help="policy, or policy:max-length to skip longer documents")
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--chunk-size", type=int, default=1024)
    parser.add_argument("--stabilizers", type=int, default=512)
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = write_random_model(args.shape, tmp / "model")
        print(f"shape {args.shape}, budget {args.budget}, chunk {args.chunk_size}, stabilizers {args.stabilizers}, "
              f"dtype {args.dtype}\n")
        print("| policy | document tokens | KV cache peak | full cache would need | peak RSS | prefill tok/s | "
              "decode tok/s | time to first token |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for spec in args.policies.split(","):
            policy, _, limit = spec.partition(":")
            for length in lengths:
                if limit and length > int(limit):
                    continue
                document = tmp / f"doc-{length}.txt"
                if not document.exists():
                    write_document(document, length)
                r = run(model_dir, document, policy, args)
                mib = 1 << 20
                decode = r["speed"]["decode_tokens_per_s"]
                print(f"| {policy} | {r['document']['tokens']:,} | {r['kv_cache']['peak_bytes'] / mib:,.1f} MiB | "
                      f"{r['kv_cache']['full_cache_bytes'] / mib:,.1f} MiB | {r['memory']['peak_bytes'] / mib:,.0f} MiB | "
                      f"{r['speed']['prefill_tokens_per_s']:,.0f} | {'-' if decode is None else f'{decode:,.1f}'} | "
                      f"{r['speed']['time_to_first_token_s']:,.1f} s |", flush=True)


if __name__ == "__main__":
    main()
