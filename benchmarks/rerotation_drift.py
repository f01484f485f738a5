"""How much error bf16 keys pick up when they move many times (compact positions): locret's cache, which turns every
move from the key's unrotated copy, against turning the stored key from its last position each time.

    python benchmarks/rerotation_drift.py

512 random 128-dim keys with Llama 3's base frequencies (theta 500000) start at positions 100K-200K; each step moves
every key to 99% of its position. After 1, 10, 100 and 300 steps the keys are compared with an exact fp32 rotation of
the original key to the final position.
"""

from __future__ import annotations

import torch

from locret_cli.core.attention.rope import position_cos_sin, rotate
from locret_cli.core.cache.bounded import LocretCache

STEPS = (1, 10, 100, 300)


def error(keys: torch.Tensor, exact: torch.Tensor) -> float:
    return ((keys.float() - exact).norm(dim=-1) / exact.norm(dim=-1)).mean().item()


def main() -> None:
    torch.manual_seed(0)
    dim, count = 128, 512
    freq = 1.0 / (500000 ** (torch.arange(0, dim, 2).float() / dim))
    pre_rope = torch.randn(1, 1, count, dim)
    positions = torch.randint(100000, 200000, (1, 1, count), dtype=torch.int32)
    first = rotate(pre_rope, *position_cos_sin(positions, freq)).bfloat16()
    cache = LocretCache(1, reserved=count)
    cache.frequencies = freq
    cache.stage(positions.view(-1), positions.view(-1))
    cache.layers[0].update(first, first)
    cumulative, everything = first, torch.arange(count).view(1, 1, count)
    print("| moves | turned from the last position | locret's cache (from the unrotated copy) |\n|---:|---:|---:|")
    for step in range(1, max(STEPS) + 1):
        moved = (positions * 0.99).to(torch.int32)
        cumulative = rotate(cumulative, *position_cos_sin(moved - positions, freq))
        cache.evict(0, everything, moved)  # keeps every entry, moved to its new position
        positions = moved
        if step in STEPS:
            exact = rotate(pre_rope, *position_cos_sin(positions, freq))
            old, new = error(cumulative, exact), error(cache.layers[0].keys, exact)
            print(f"| {step} | {100 * old:.2g}% | {100 * new:.2g}% |")


if __name__ == "__main__":
    main()
