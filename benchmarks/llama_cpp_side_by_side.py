"""locret beside llama.cpp on the same model, CPU and threads: prompt processing, decode and peak memory.

    python benchmarks/llama_cpp_side_by_side.py --gguf runs/qwen1.5b/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --lengths 8k,32k [--variants stored,int8] > side.md

llama.cpp (`pip install llama-cpp-python`, which compiles it from its sdist on this machine: build it into a
benchmark venv, never CI's, with `--no-cache-dir`: pip otherwise reuses a wheel built earlier with other
`CMAKE_ARGS`; `--llama-python` names its Python) reads the GGUF file, its weights staying 4-bit, and evaluates the first N tokens of the
handbook (`samples/handbook.txt`) in batches of 512, then decodes `--decode` greedy tokens. locret reads its
converted folder of the same file through `locret bench` (its own fresh process per cell; a generated document of N
tokens; the locret policy at the model's recorded settings, and `--policy full`), and decodes as many tokens.
`--variants` names the ways locret's rows load the model (`VARIANTS`): `stored` (the weights as the folder stores
them, bf16), `int8` (`--load-8bit`), `int4` (`--load-int4`), `fp32-weights` (`LOCRET_BF16_WEIGHTS=0`: widened to fp32 when they load, as
before `runtime/bf16_weights.py`, where the CPU computes in fp32) and `packed` (`LOCRET_NATIVE_ROWS=0`: one-row
products through oneDNN's packed copy of the weights, as before `runtime/native_rows.py`, where it computes in
bf16). Every cell runs alone, one after another, with the same thread count: run nothing else meanwhile. Prints a markdown table and writes the raw figures as JSON lines to
`--out` (one per cell; a rerun skips the cells there, so an interrupted run resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HANDBOOK = Path(__file__).resolve().parents[1] / "samples" / "handbook.txt"
BATCH = 512
VARIANTS = {  # name -> (environment, bench options, the rows' label)
    "stored": ({}, [], ""),
    "int8": ({}, ["--load-8bit"], ", int8 weights"),
    "int4": ({}, ["--load-int4"], ", 4-bit weights"),
    "fp32-weights": ({"LOCRET_BF16_WEIGHTS": "0"}, [], ", fp32 weights"),
    "packed": ({"LOCRET_NATIVE_ROWS": "0"}, [], ", oneDNN-packed copy"),
}


def llama_cell(gguf: str, length: int, decode: int, threads: int) -> dict:
    """llama.cpp's prompt processing of `length` tokens and `decode` greedy steps, in this process."""
    from llama_cpp import Llama

    model = Llama(model_path=gguf, n_ctx=length + decode + 8, n_threads=threads, n_threads_batch=threads,
                  n_batch=BATCH, verbose=False)
    tokens = model.tokenize(HANDBOOK.read_text().encode())
    while len(tokens) < length:
        tokens += tokens
    tokens = tokens[:length]
    started = time.perf_counter()
    model.eval(tokens)
    prompt_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(decode):
        model.eval([model.sample(temp=0.0)])
    decode_s = time.perf_counter() - started
    return {"system": "llama.cpp", "row": "llama.cpp, Q4_K_M weights", "length": length,
            "prefill_tokens_per_s": length / prompt_s, "decode_tokens_per_s": decode / decode_s,
            "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "threads": threads}


def locret_rows(model: str, length: int, decode: int, threads: int, variant: str) -> list[dict]:
    """`locret bench`'s locret and full rows for one length and variant, each cell in its own process."""
    env, options, label = VARIANTS[variant]
    command = [sys.executable, "-m", "locret_cli", "bench", "--model", model, "--policies", "locret,full",
               "--lengths", str(length), "--samples", "1", "--max-new-tokens", str(decode), "--json", *options]
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          env={**os.environ, **env, "OMP_NUM_THREADS": str(threads)})
    document = json.loads(done.stdout)
    return [{"system": "locret", "row": f"locret, {row['policy']}{label}", "variant": label, "length": length,
             "prefill_tokens_per_s": row["prefill_tokens_per_s"], "decode_tokens_per_s": row["decode_tokens_per_s"],
             "peak_bytes": row["peak_bytes"], "compute": document["config"]["compute"], "threads": threads}
            for row in document["rows"]]


def table(cells: list[dict]) -> str:
    """Markdown: one line per row and length, with the prefill and decode ratios to llama.cpp's at that length."""
    llama = {c["length"]: c for c in cells if c["system"] == "llama.cpp"}
    lines = ["| row | tokens | prefill tok/s | decode tok/s | peak RSS | prefill / llama.cpp | decode / llama.cpp |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for c in sorted(cells, key=lambda c: (c["length"], c["system"] != "llama.cpp", c["row"])):
        base = llama.get(c["length"])
        ratios = [f"{c[k] / base[k]:.2f}" if base else "-" for k in ("prefill_tokens_per_s", "decode_tokens_per_s")]
        lines.append(f"| {c['row']} | {c['length']:,} | {c['prefill_tokens_per_s']:.1f} | "
                     f"{c['decode_tokens_per_s']:.2f} | {c['peak_bytes'] / 2**30:.2f} GiB | {' | '.join(ratios)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--model", required=True, help="locret's converted folder of the same GGUF file")
    parser.add_argument("--lengths", default="8k")
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--variants", default="stored", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--llama-python", default=sys.executable, help="the Python that has llama_cpp installed")
    parser.add_argument("--systems", default="llama.cpp,locret", help="the systems to measure now")
    parser.add_argument("--out", default="runs/llama-side.jsonl")
    parser.add_argument("--llama-cell", type=int, help=argparse.SUPPRESS)  # one llama.cpp cell, in a child process
    args = parser.parse_args()
    if args.llama_cell:
        print(json.dumps(llama_cell(args.gguf, args.llama_cell, args.decode, args.threads)))
        return
    out = Path(args.out)
    cells = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {(c["system"], c["length"], c.get("variant", ", fp32 weights" if c["row"].endswith("fp32 weights") else ""))
            for c in cells}
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    for length in (int(n[:-1]) * 1024 if n.endswith("k") else int(n) for n in args.lengths.split(",")):
        new = []
        if "llama.cpp" in args.systems and ("llama.cpp", length, "") not in done:
            child = subprocess.run([args.llama_python, __file__, "--gguf", args.gguf, "--model", args.model,
                                    "--decode", str(args.decode), "--threads", str(args.threads),
                                    "--llama-cell", str(length)], capture_output=True, text=True, check=True)
            new.append(json.loads(child.stdout.strip().splitlines()[-1]))
        for variant in variants if "locret" in args.systems else ():
            if ("locret", length, VARIANTS[variant][2]) not in done:
                new += locret_rows(args.model, length, args.decode, args.threads, variant)
        with out.open("a") as sink:
            sink.writelines(json.dumps(c) + "\n" for c in new)
        cells += new
    print(table(cells))


if __name__ == "__main__":
    main()
