"""One layer's eviction, as the engine runs it after each chunk: top-k selection, keeping every field of the chosen
entries, and turning the kept keys to their compact positions (docs/measurements/what-makes-it-fast.md).

    python benchmarks/eviction_microbench.py                       # SmolLM2's recorded settings
    python benchmarks/eviction_microbench.py --kv-heads 2 --budget 1024 --chunk 512 --span 1   # the embedded model's

A cache of `--layers` layers is filled with random entries and scores, then evicted down to the budget and refilled
with a chunk, `--evictions` times after 5 not counted. Prints the mean milliseconds of one layer's eviction, and a
checksum of what the cache holds at the end: the same seed keeps the same entries, so two versions of the engine
that keep the same entries print the same checksum.
"""

from __future__ import annotations

import argparse
import time

import torch

from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.policies.base import select


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--span", type=int, default=8)
    parser.add_argument("--stabilizers", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--evictions", type=int, default=40)
    args = parser.parse_args()
    heads, budget, chunk = args.kv_heads, args.budget, args.chunk
    cache = LocretCache(args.layers, reserved=budget + chunk + 64, step=chunk, budget=budget)
    cache.frequencies = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    generator = torch.Generator().manual_seed(0)
    seen = 0

    def append() -> None:
        nonlocal seen
        count, start = (chunk, cache.length()) if cache.length() else (budget + chunk, 0)
        cache.stage(torch.arange(start, start + count), torch.arange(seen, seen + count))
        seen += count
        for index, layer in enumerate(cache.layers):
            cache.stage_scores(index, torch.rand(1, heads, count, generator=generator))
            layer.update(*(torch.randn(1, heads, count, 64, generator=generator).bfloat16() for _ in range(2)))

    renumbered = torch.arange(budget, dtype=torch.int32).expand(1, heads, budget)

    def evict() -> float:
        started = time.perf_counter()
        for index, layer in enumerate(cache.layers):
            keep = select(layer.scores, budget, args.stabilizers, 0, layer.origins, args.span)
            cache.evict(index, keep, renumbered)
        return time.perf_counter() - started

    append()
    total = 0.0
    for step in range(args.evictions + 5):
        spent = evict()
        total += spent if step >= 5 else 0.0
        append()
    checksum = sum(float(layer.keys.float().sum() + layer.unrotated.float().sum()) + int(layer.origins.sum())
                   for layer in cache.layers)
    print(f"one layer's eviction: {total / args.evictions / args.layers * 1e3:.3f} ms "
          f"({heads} KV heads, budget {budget}, chunk {chunk}, span {args.span}); checksum {checksum:.12g}")


if __name__ == "__main__":
    main()
