"""Prefill speed and memory of locret against kvpress SnapKV, side by side on the same model shape and kept count.

    python -m venv ../kvpress-venv && ../kvpress-venv/bin/pip install torch==2.13.0 kvpress==0.5.5
    python benchmarks/kvpress_side_by_side.py --kvpress-python ../kvpress-venv/bin/python --lengths 16k,64k

kvpress pins a transformers release older than locret's, so it lives in its own venv: this script runs every
measurement in a fresh worker process, locret's under this interpreter and kvpress's under --kvpress-python, and
prints one markdown table. Both workers build a random-weights model of the same shape in bf16 (the preset's config
is handed to the kvpress worker as JSON), feed it the same random token ids, and keep the same number of entries
per KV head:
- locret reads in chunks with its own random retaining heads and keeps `--kept` entries (the budget);
- kvpress prefills in one forward under `SnapKVPress(compression_ratio=1 - kept / length)`, as its README shows.
Each figure is one run, nothing warmed up; prefill tok/s is length over the prefill's wall time, and peak RSS is the
worker's own (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from importlib.metadata import version

SEED = 0


def random_ids(vocab_size: int, length: int):
    import torch

    return torch.randint(0, vocab_size, (length,), generator=torch.Generator().manual_seed(SEED))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def locret_worker(spec: dict) -> dict:
    import torch

    from locret_cli.core.engine import Engine
    from locret_cli.core.heads import RetainingHeads
    from locret_cli.core.policies.locret import LocretPolicy
    from locret_cli.inputs.sources import TokenChunk
    from locret_cli.models.arch import random_model
    from locret_cli.runtime.native_rows import take_rows
    from locret_cli.runtime.packed_linear import pack_linears
    from locret_cli.settings import ReadSettings

    model = random_model(spec["preset"], torch.bfloat16)
    torch.manual_seed(SEED)
    heads = RetainingHeads.for_model(model).eval()
    settings = ReadSettings(budget=spec["kept"], chunk_size=spec["chunk"], stabilizers=spec["kept"] // 2)
    take_rows(model)  # as a session makes it ready: one row by locret's kernel where built, else packed
    pack_linears(model)
    ids = random_ids(model.config.vocab_size, spec["length"]).tolist()
    chunks = (TokenChunk(ids[i:i + settings.chunk_size], None, None, 0) for i in range(0, len(ids), settings.chunk_size))
    engine = Engine(model, LocretPolicy(heads), settings)
    started = time.perf_counter()
    engine.read(chunks)
    seconds = time.perf_counter() - started
    return {"kept": engine.cache.length(), "prefill_s": seconds, "peak_rss": peak_rss_bytes()}


def kvpress_worker(spec: dict) -> dict:
    import kvpress
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig

    config = LlamaConfig.from_dict(spec["config"])
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    ids = random_ids(config.vocab_size, spec["length"]).unsqueeze(0)
    press = kvpress.SnapKVPress(compression_ratio=1 - spec["kept"] / spec["length"])
    cache = DynamicCache()
    started = time.perf_counter()
    with torch.no_grad(), press(model):
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    seconds = time.perf_counter() - started
    kept = cache.layers[0].keys.shape[2]
    return {"kept": kept, "prefill_s": seconds, "peak_rss": peak_rss_bytes(),
            "version": f"kvpress {version('kvpress')}, transformers {transformers.__version__}"}


def run_worker(python: str, kind: str, spec: dict) -> dict:
    done = subprocess.run([python, __file__, "--worker", kind], input=json.dumps(spec), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("locret", "kvpress"))
    parser.add_argument("--kvpress-python", default="../kvpress-venv/bin/python")
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--lengths", default="16k,64k")
    parser.add_argument("--kept", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=1024)
    args = parser.parse_args()
    if args.worker:
        worker = locret_worker if args.worker == "locret" else kvpress_worker
        print(json.dumps(worker(json.loads(sys.stdin.read()))))
        return

    from locret_cli.bench.suite import parse_lengths
    from locret_cli.models.arch import preset_config

    config = preset_config(args.preset).to_dict()
    print("| tokens | locret prefill tok/s | kvpress SnapKV prefill tok/s | locret lead | locret peak RSS | "
          "kvpress peak RSS | kept per head (locret / kvpress) |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    version = None
    for length in parse_lengths(args.lengths):
        spec = {"preset": args.preset, "config": config, "length": length, "kept": args.kept, "chunk": args.chunk}
        ours = run_worker(sys.executable, "locret", spec)
        theirs = run_worker(args.kvpress_python, "kvpress", spec)
        version = theirs["version"]
        print(f"| {length:,} | {length / ours['prefill_s']:,.0f} | {length / theirs['prefill_s']:,.0f} | "
              f"{theirs['prefill_s'] / ours['prefill_s']:.1f}× | {ours['peak_rss'] / 2**20:,.0f} MiB | "
              f"{theirs['peak_rss'] / 2**20:,.0f} MiB | {ours['kept']:,} / {theirs['kept']:,} |", flush=True)
    print(f"\n{version}; {args.preset} shape, random weights, bf16, kept {args.kept}, locret chunk {args.chunk}")


if __name__ == "__main__":
    main()
