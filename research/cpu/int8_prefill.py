"""Dynamic int8 linears for a prefill chunk: what they gain in time, and what they change in the outputs.

    python -m research.cpu.int8_prefill                   # one SmolLM2-135M layer's linears, a 1,024-token chunk
    python -m research.cpu.int8_prefill --rows 512        # another chunk size
    python -m research.cpu.int8_prefill --shape qwen2.5-1.5b  # a Qwen2.5-1.5B layer's: qkv, o, gate+up, down

Each linear of the chunk runs three ways, on the same random input and weights:
- bf16 `F.linear`, as the engine runs a chunk;
- dynamic int8: each row of the input rounded to int8 with its own scale, the weight to int8 with one scale per output,
  `torch._int_mm` (int32 sums), then both scales applied; the time counts the rounding of the input and the scaling;
- the same with the rounding and the scaling each compiled by `torch.compile` (one pass each, not torch's several);
- the same product alone, without the rounding and scaling, for the share they cost.

It prints the time of each and the int8 output's error against the bf16 one, relative to the output's size.
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
import torch.nn.functional as F

from benchmarks.kernel_microbench import QWEN15_LINEARS, SMOLLM2_LINEARS, seconds

SHAPES = {"smollm2-135m": SMOLLM2_LINEARS, "qwen2.5-1.5b": QWEN15_LINEARS}  # (out, in) of one layer's linears


def rounded(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 rows of `t` (rows, n), each with its own scale (rows, 1)."""
    scale = t.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-8) / 127
    return (t.float() / scale).round_().clamp_(-127, 127).to(torch.int8), scale


def scaled(sums: torch.Tensor, x_scale: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    return (sums.float() * x_scale * weight_scale).to(torch.bfloat16)


def dynamic_int8(x: torch.Tensor, weight_t: torch.Tensor, weight_scale: torch.Tensor, round_=rounded,
                 scale=scaled) -> torch.Tensor:
    """x (rows, in) bf16 times the int8 weight (in, out) with scales (1, out), in bf16."""
    x8, x_scale = round_(x)
    return scale(torch._int_mm(x8, weight_t), x_scale, weight_scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    args = parser.parse_args()
    torch.manual_seed(0)
    round_compiled, scale_compiled = torch.compile(rounded, dynamic=False), torch.compile(scaled, dynamic=False)
    total = {"bf16": 0.0, "int8": 0.0, "compiled": 0.0, "product": 0.0}
    print(f"{args.shape}, {torch.get_num_threads()} threads, {args.rows} rows")
    print("| out × in | bf16 µs | dynamic int8 µs | the same, compiled µs | product alone µs | relative error |")
    print("|---|---:|---:|---:|---:|---:|")
    for out_features, in_features in SHAPES[args.shape]:
        x = torch.randn(args.rows, in_features).to(torch.bfloat16)
        weight = (torch.randn(out_features, in_features) / in_features**0.5).to(torch.bfloat16)
        w8, w_scale = rounded(weight)
        w8_t, w_scale = w8.t().contiguous(), w_scale.t()
        x8, _ = rounded(x)
        times = {"bf16": seconds(partial(F.linear, x, weight), args.repeats),
                 "int8": seconds(partial(dynamic_int8, x, w8_t, w_scale), args.repeats),
                 "compiled": seconds(partial(dynamic_int8, x, w8_t, w_scale, round_compiled, scale_compiled),
                                     args.repeats),
                 "product": seconds(partial(torch._int_mm, x8, w8_t), args.repeats)}
        reference = F.linear(x, weight).float()
        error = (dynamic_int8(x, w8_t, w_scale).float() - reference).norm() / reference.norm()
        for name, value in times.items():
            total[name] += value
        print(f"| {out_features} × {in_features} | {times['bf16'] * 1e6:.0f} | {times['int8'] * 1e6:.0f} | "
              f"{times['compiled'] * 1e6:.0f} | {times['product'] * 1e6:.0f} | {error:.4f} |")
    print(f"| one layer | {total['bf16'] * 1e6:.0f} | {total['int8'] * 1e6:.0f} | {total['compiled'] * 1e6:.0f} | "
          f"{total['product'] * 1e6:.0f} | |")


if __name__ == "__main__":
    main()
