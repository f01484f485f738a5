"""A chunk's 4-bit linears computing in fp32, the Qwen2.5-1.5B's 28 layers (random weights): seconds, best of three.

    PYTHONPATH=. python research/cpu/int4_chunk_widen.py --rows 1024
    git worktree add /tmp/before REV && PYTHONPATH=/tmp/before python research/cpu/int4_chunk_widen.py --rows 1024

The script's own folder comes first on the path, then PYTHONPATH's checkout: its locret_cli is the one timed. Run
both a few times in turn, to set one revision's widening beside another's;
the checksum of the first layer's outputs shows whether both computed the same numbers. Eight layers are held and
timed, and the time scaled to 28 (the weights stream from memory either way).
"""

from __future__ import annotations

import argparse
import time

import torch

from locret_cli.runtime.int4_linear import Int4Linear, quantize_groups

SHAPES = [(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536), (1536, 8960)]
LAYERS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    rows = parser.parse_args().rows
    torch.manual_seed(0)
    linears = [Int4Linear(*quantize_groups(torch.randn(o, i, dtype=torch.bfloat16) * 0.02), i, None)
               for _ in range(LAYERS) for o, i in SHAPES]
    inputs = {i: torch.randn(rows, i) for _, i in SHAPES}
    with torch.no_grad():
        run = lambda: [linear(inputs[linear.in_features]) for linear in linears]  # noqa: E731
        run()
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        checksum = torch.cat([linear(inputs[linear.in_features]).flatten() for linear in linears[:7]]).double().sum()
    print(f"{min(times) * 28 / LAYERS:.2f} s for 28 layers, {rows} rows; checksum {checksum.item():.6f}")


if __name__ == "__main__":
    main()
