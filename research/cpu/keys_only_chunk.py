"""A chunk read with the last layer's keys and values alone (`core/keys_only.py`) against the same chunk read through
whole forwards, paired in one process.

    python -m research.cpu.keys_only_chunk --preset qwen2.5-1.5b --dtype fp32 --budget 4096 --chunk 1024 --rounds 5

A random-weights model of the preset's shape (bf16 weights computing in fp32 with `--dtype fp32`, as an AVX2 CPU
runs them) fills its cache as `benchmarks/profile_engine.py` does; each round then reads one more chunk twice on
forks of that engine, once each way, the order alternating from round to round, and checks that both caches are the
same bit for bit. Prints each round's two times and the median ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext
from itertools import islice
from unittest import mock

import torch

from benchmarks.profile_engine import filled_engine, ready_model
from locret_cli.core import engine as engine_module
from locret_cli.models.loading import DTYPES


def timed_chunk(engine, ids: list[int], whole: bool) -> tuple[float, list[dict]]:
    """Seconds to read `ids` on a fork of `engine` (through whole forwards if `whole`), and the fork's cache."""
    fork = engine.fork()
    patch = mock.patch.object(engine_module, "keys_and_values_only", lambda _model: nullcontext()) if whole \
        else nullcontext()
    with patch, torch.no_grad():
        started = time.perf_counter()
        fork.prefill_chunk(ids)
        seconds = time.perf_counter() - started
    return seconds, [layer.tensors() for layer in fork.cache.layers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="qwen2.5-1.5b")
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heads-hidden", type=int, default=256)
    args = parser.parse_args()

    widened = args.dtype == "fp32"
    model, heads = ready_model(args.preset, args.dtype, args.heads_hidden, widened)
    tokens = args.budget + args.chunk * (args.rounds + 3)
    engine, chunks, _ = filled_engine(model, heads, args.budget, args.chunk, tokens, 0)
    ratios = []
    print("| round | keys and values only (s) | whole forwards (s) | ratio |\n|---:|---:|---:|---:|")
    for index, chunk in enumerate(islice(chunks, args.rounds)):
        order = (False, True) if index % 2 == 0 else (True, False)
        results = {whole: timed_chunk(engine, chunk.ids, whole) for whole in order}
        (only, kept), (whole, kept_whole) = results[False], results[True]
        assert all(torch.equal(a[name], b[name]) for a, b in zip(kept, kept_whole, strict=True) for name in a), \
            "the two reads left different caches"
        ratios.append(only / whole)
        print(f"| {index + 1} | {only:.2f} | {whole:.2f} | {only / whole:.3f} |")
    print(f"\nmedian ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); {args.preset} shape, "
          f"random weights, {'bf16 weights computing in fp32' if widened else args.dtype}, budget {args.budget}, "
          f"chunk {args.chunk}, {torch.get_num_threads()} threads; the caches equal bit for bit in every round")


if __name__ == "__main__":
    main()
