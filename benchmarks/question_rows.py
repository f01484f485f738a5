"""A question's rows through a model's linears: by locret's rows kernels, or through each weight widened first.

    python benchmarks/question_rows.py              # Qwen2.5-1.5B's 28 layers of linears, random weights
    python benchmarks/question_rows.py --layers 24 --shape qwen2.5-0.5b

After a read, a question of a few dozen tokens is prefilled on top of the cache. Where torch's product needs the
weight in the rows' dtype (bf16 weights under fp32 arithmetic, int8 and 4-bit weights), a chunk widens every weight
first; locret's rows kernels read the weights as stored for each row instead. This times both ways for 8 to 96
fp32 rows, each weight kind as the model holds it (`bf16_weights`, `Int8Linear`, `Int4Linear`), the widened way by
holding `QUESTION_ROWS` at `native_rows.ROWS` (as every product did before questions went to the kernels); "as
shipped" is the kernel up to `QUESTION_ROWS` rows and the widened weight above. Prints a markdown table, seconds for
all the layers' linears, the best of three after a warm-up. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import torch
from torch import nn

from locret_cli.runtime import bf16_weights, native_rows
from locret_cli.runtime.int4_linear import Int4Linear
from locret_cli.runtime.int8_linear import Int8Linear

SHAPES = {"qwen2.5-1.5b": [(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536),
                           (1536, 8960)],
          "qwen2.5-0.5b": [(896, 896), (128, 896), (128, 896), (896, 896), (4864, 896), (4864, 896), (896, 4864)]}
ROWS = (8, 16, 24, 32, 48, 64, 96)


def layers_of(kind: str, shapes: list[tuple[int, int]], layers: int) -> nn.ModuleList:
    """The linears of `layers` layers, random weights, held as `kind` ("bf16", "int8", "int4") for fp32 rows."""
    torch.manual_seed(0)
    linears = [nn.Linear(i, o, bias=False).to(torch.bfloat16) for _ in range(layers) for o, i in shapes]
    if kind == "int8":
        return nn.ModuleList(Int8Linear.from_linear(linear, torch.float32) for linear in linears)
    if kind == "int4":
        return nn.ModuleList(Int4Linear.from_linear(linear, torch.float32) for linear in linears)
    held = nn.ModuleList(linears)
    bf16_weights.keep_bf16_weights(held)
    return held


def best_of_three(held: nn.ModuleList, rows: int) -> float:
    inputs = {linear.in_features: torch.randn(rows, linear.in_features) for linear in held}
    with torch.no_grad():
        [linear(inputs[linear.in_features]) for linear in held]
        times = []
        for _ in range(3):
            started = time.perf_counter()
            [linear(inputs[linear.in_features]) for linear in held]
            times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--layers", type=int, default=28)
    args = parser.parse_args()
    if native_rows.kernels() is None:
        raise SystemExit("locret's rows kernels are not built here (no AVX2 and FMA, or no C compiler)")
    kinds = ("bf16", "int8", "int4")
    print("| rows | " + " | ".join(f"{kind}: as shipped | {kind}: widened" for kind in kinds) + " |")
    print("|---:|" + "---:|" * 2 * len(kinds))
    cells: dict[int, list[str]] = {rows: [] for rows in ROWS}
    for kind in kinds:
        held = layers_of(kind, SHAPES[args.shape], args.layers)
        for rows in ROWS:
            kernel = best_of_three(held, rows)
            with mock.patch.object(native_rows, "QUESTION_ROWS", native_rows.ROWS):  # every weight widened
                widened = best_of_three(held, rows)
            cells[rows] += [f"{kernel:.2f} s", f"{widened:.2f} s"]
        del held
    for rows in ROWS:
        print(f"| {rows} | " + " | ".join(cells[rows]) + " |")
    print(f"\n{args.layers} layers of {args.shape}'s linears, fp32 rows; QUESTION_ROWS = {native_rows.QUESTION_ROWS}")


if __name__ == "__main__":
    main()
