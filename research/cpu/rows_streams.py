"""locret's one-row kernels for bf16 and int8 weights at two versions of their source, side by side in one process:
one decode step's linears of Qwen2.5-1.5B (the modules apart, as the model holds them; the tied head last), one row
each, every weight distinct, rows fp32 (a CPU computing in fp32) and bf16.

The sources of a git revision (`--base`, read with `git show`) and of the working tree are each compiled as the
product compiles them (`runtime/native_build.py`), then timed in turn, round after round, so that both see the same
host; each round's time is the mean of a few steps. Before timing, both versions' outputs are checked against the
fp32 product of the widened weights.

    python -m research.cpu.rows_streams --base HEAD --rounds 7
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from locret_cli.runtime import native_build, native_rows

QWEN15_ROWS = ([(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536), (1536, 8960)] * 28
               + [(151936, 1536)])  # q, k, v, o, gate, up, down per layer; the head
KERNELS = {"rows_bf16w.c": ("rows_bf16w", "rows_bf16", 2), "rows_int8w.c": ("rows_int8w", "rows_int8", 3)}
STEPS = 3  # steps a round's time is the mean of


def functions(source: Path, names: tuple[str, str, int]) -> dict[torch.dtype, ctypes._CFuncPtr]:
    """The fp32-row and bf16-row functions of the kernel `source`, built and typed as the product builds them
    (`native_rows._built`; an absolute path stands for itself there)."""
    built = native_rows._built(str(source), {torch.float32: names[0], torch.bfloat16: names[1]}, names[2])
    if built is None:
        raise SystemExit(f"{source.name} was not built here (no AVX2 and FMA, or no C compiler)")
    return built


def weights(kernel: str) -> list[tuple[torch.Tensor, ...]]:
    """The step's weights for `kernel`: bf16 weights, or int8 weights with an fp32 scale per row."""
    if kernel == "rows_bf16w.c":
        return [(torch.randn(o, i, dtype=torch.bfloat16),) for o, i in QWEN15_ROWS]
    return [(torch.randint(-127, 128, (o, i), dtype=torch.int8), torch.rand(o) * 0.01) for o, i in QWEN15_ROWS]


def in_dtype(step: list[tuple[torch.Tensor, ...]], dtype: torch.dtype) -> list[tuple[torch.Tensor, ...]]:
    """The step's weights with each int8 weight's scale in `dtype`, the rows' dtype, as the kernels take it."""
    return [w if len(w) == 1 else (w[0], w[1].to(dtype)) for w in step]


def call(function, x: torch.Tensor, weight: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """y = x Wᵀ (times the int8 weight's scale, in x's dtype), no bias, by `function`."""
    y = torch.empty(1, weight[0].shape[0], dtype=x.dtype)
    vectors = [v.data_ptr() for v in weight[1:]]
    status = function(x.data_ptr(), 1, x.shape[1], weight[0].data_ptr(), weight[0].shape[0], *vectors, None,
                      y.data_ptr())
    if status != 0:
        raise SystemExit(f"the kernel declined ({status})")
    return y


def exact(x: torch.Tensor, weight: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The fp32 product of x and the widened weight (times its scale)."""
    y = x.float() @ weight[0].float().T
    return y * weight[1].float() if len(weight) > 1 else y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the git revision whose kernel sources are the baseline")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    native = native_build.NATIVE
    folder = Path(tempfile.mkdtemp(prefix="locret-rows-base-"))
    print(f"| kernel, rows | {args.base} | working tree | working tree / {args.base} (median of {args.rounds} paired "
          f"rounds) | largest difference from the fp32 product, {args.base} / working tree |")
    print("|---|---:|---:|---:|---|")
    for kernel, names in KERNELS.items():
        base_source = folder / kernel
        base_source.write_text(subprocess.run(["git", "show", f"{args.base}:{native.relative_to(Path.cwd())}/{kernel}"],
                                              capture_output=True, text=True, check=True).stdout)
        versions = {"base": functions(base_source, names), "tree": functions(native / kernel, names)}
        step = weights(kernel)
        size = sum(t.numel() * t.element_size() for w in step for t in w)
        for dtype in (torch.float32, torch.bfloat16):
            xs = {i: torch.randn(1, i).to(dtype) for _, i in QWEN15_ROWS}
            step = in_dtype(step, dtype)
            errors = {}
            for name, fns in versions.items():
                errors[name] = max(float((call(fns[dtype], xs[w[0].shape[1]], w).float()
                                          - exact(xs[w[0].shape[1]], w)).abs().max()) for w in step[:7] + step[-1:])
            took = {name: [] for name in versions}
            for _ in range(args.rounds):
                for name, fns in versions.items():
                    started = time.perf_counter()
                    for _ in range(STEPS):
                        for w in step:
                            call(fns[dtype], xs[w[0].shape[1]], w)
                    took[name].append((time.perf_counter() - started) / STEPS)
            base, tree = statistics.median(took["base"]), statistics.median(took["tree"])
            ratio = statistics.median(t / b for b, t in zip(took["base"], took["tree"]))
            print(f"| {names[0]}, {str(dtype).removeprefix('torch.')} | {1e3 * base:.1f} ms ({size / base / 1e9:.1f} "
                  f"GB/s) | {1e3 * tree:.1f} ms ({size / tree / 1e9:.1f} GB/s) | {ratio:.2f} | "
                  f"{errors['base']:.2g} / {errors['tree']:.2g} |")
        step.clear()


if __name__ == "__main__":
    main()
