"""How much error bf16 keys pick up when they are re-rotated many times (compact positions).

    python docs/scripts/rerotation_drift.py

512 random 128-dim keys with Llama 3's base frequencies (theta 500000) start at positions 100K-200K; each step moves
every key to 99% of its position, re-rotating the stored bf16 key. After 1, 10, 100 and 300 steps the keys are
compared with an exact fp32 rotation of the original key to the final position.
"""

from __future__ import annotations

import torch

from locret_cli.rope import rerotation_angles, rotate


def main() -> None:
    torch.manual_seed(0)
    dim, count = 128, 512
    freq = 1.0 / (500000 ** (torch.arange(0, dim, 2).float() / dim))
    keys = torch.randn(1, 1, count, dim)

    def at(positions):
        return rotate(keys, positions.double()[..., None] * freq.double())

    positions = torch.randint(100000, 200000, (1, 1, count))
    stored = at(positions).bfloat16()
    print("| moves | mean relative key error (bf16) |\n|---:|---:|")
    for step in range(1, 301):
        moved = (positions * 0.99).long()
        stored = rotate(stored, rerotation_angles(positions, moved, freq, freq))
        positions = moved
        if step in (1, 10, 100, 300):
            exact = at(positions)
            error = ((stored.float() - exact).norm(dim=-1) / exact.norm(dim=-1)).mean().item()
            print(f"| {step} | {100 * error:.2g}% |")


if __name__ == "__main__":
    main()
