"""Where a prefill chunk and a decode step spend their time, from torch.profiler.

    python benchmarks/profile_engine.py --preset smollm2-135m --budget 1024 --chunk 512 --tokens 16384

A random-weights model of the preset's shape reads a generated document (the bench's `needle` text, through the
byte-level tokenizer) until its cache is full, then `--chunks` more chunks are read twice: once plainly, for the
wall time, and once under the profiler. The question is prefilled, and `--steps` decode steps are timed the same two
ways. Each profiled op is put in one category: the engine's own ranges (`core/profile_marks.py`) by name, the
model's ops by kind, and what no op covers is Python and framework overhead. Prints two markdown tables, per
chunk and per decode step, in milliseconds of the profiled run (the profiler itself adds some of the overhead).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from itertools import islice

import torch
from torch.profiler import ProfilerActivity, profile

from locret_cli.bench.tasks import generated_samples
from locret_cli.core import profile_marks as marks
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.documents import token_chunks
from locret_cli.inputs.prompt import PromptTokens, prompt_layout
from locret_cli.inputs.sources import SourceMap
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from locret_cli.models.arch import random_model
from locret_cli.models.loading import DTYPES
from locret_cli.runtime.bf16_weights import keep_bf16_weights
from locret_cli.runtime.int8_linear import quantize_linears
from locret_cli.runtime.native_rows import take_rows
from locret_cli.runtime.packed_linear import pack_linears
from locret_cli.settings import AnswerSettings, ReadSettings

MARK_CATEGORIES = {
    marks.CACHE_UPDATE: "cache append", marks.CAPTURE: "hooks and q/k/v capture", marks.HEADS: "retaining heads",
    marks.SELECT: "top-k selection and gather", marks.REROTATE: "re-rotation", marks.FREQUENCIES: "rotary frequencies",
    marks.TOKENIZE: "tokenization", marks.WIDEN: "bf16 weights widened to fp32",
    marks.ROWS_KERNEL: "linear layers",
}
LINEAR_OPS = ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul", "mkldnn::_linear_pointwise")
ATTENTION_OPS = ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu")
ORDER = ["linear layers", "bf16 weights widened to fp32", "attention", "retaining heads", "hooks and q/k/v capture", "cache append",
         "torch.cat outside the ranges", "top-k selection and gather", "re-rotation", "rotary frequencies",
         "tokenization", "other model ops (norms, RoPE, activations, residuals)", "Python and framework overhead"]


def category_of(name: str) -> str:
    """A model op's category. `aten::cat` gets its own: RoPE's rotate_half uses it, and so did the cache's growth
    before it had preallocated buffers (an engine without the ranges profiles that way)."""
    if name in LINEAR_OPS:
        return "linear layers"
    if name in ATTENTION_OPS:
        return "attention"
    if name == "aten::cat":
        return "torch.cat outside the ranges"
    return ORDER[-2]


def breakdown(prof, wall_us: float) -> Counter:
    """Microseconds per category; overhead is the wall time no top-level op or range covers."""
    totals: Counter = Counter()

    def walk(event, inside: str | None) -> None:
        if event.name in MARK_CATEGORIES:
            category = MARK_CATEGORIES[event.name]
            totals[category] += event.cpu_time_total
            if inside is not None:
                totals[inside] -= event.cpu_time_total
            for child in event.cpu_children:
                walk(child, category)
        elif inside is None:
            totals[category_of(event.name)] += event.cpu_time_total
        else:
            for child in event.cpu_children:
                walk(child, inside)

    top = [e for e in prof.events() if e.cpu_parent is None and e.device_type == torch.autograd.DeviceType.CPU]
    for event in top:
        walk(event, None)
    totals["Python and framework overhead"] = wall_us - sum(totals.values())
    return totals


def table(title: str, totals: Counter, count: int, plain_s: float) -> str:
    whole = sum(totals.values())
    lines = [f"**{title}** (profiled {whole / count / 1e3:.1f} ms each; unprofiled {plain_s / count * 1e3:.1f} ms)",
             "", "| part | ms | share |", "|---|---:|---:|"]
    for name in ORDER:
        if totals.get(name):
            lines.append(f"| {name} | {totals[name] / count / 1e3:.2f} | {100 * totals[name] / whole:.1f}% |")
    return "\n".join(lines)


def timed_chunks(chunks):
    """The chunk iterator, each `next` inside the tokenization range."""
    iterator = iter(chunks)
    while True:
        with marks.mark(marks.TOKENIZE):
            chunk = next(iterator, None)
        if chunk is None:
            return
        yield chunk


def filled_engine(model, heads, budget: int, chunk: int, tokens: int, steps: int, wrap=iter):
    """(engine, chunks, tokenizer): a locret engine with `heads` that has read a generated document of `tokens`
    tokens (the bench's `needle` text, byte-level tokens) until its cache is full, answering with up to `steps` + 1
    tokens; `chunks` are the document's chunks not read yet, through `wrap`."""
    tokenizer = TiktokenTokenizer.byte_level()
    document = generated_samples("needle", tokenizer, tokens, 1)[0].document
    prefix = prompt_layout(tokenizer).head_ids
    settings = ReadSettings(budget=budget, chunk_size=chunk, stabilizers=budget // 2)
    engine = Engine(model, LocretPolicy(heads), settings, PromptTokens(stop_ids=frozenset(), pinned=len(prefix)),
                    answering=AnswerSettings(max_new_tokens=steps + 1))
    chunks = wrap(token_chunks(document, tokenizer, chunk, prefix, SourceMap("lines")))
    engine.read(islice(chunks, (budget + chunk - 1) // chunk + 1))  # the cache is full from here
    return engine, chunks, tokenizer


def ready_model(preset: str, dtype: str, heads_hidden: int, widened: bool = False, int8: bool = False,
                pack: bool = True):
    """(model, heads): a random-weights model of `preset`'s shape in `dtype` (bf16 weights kept bf16 under fp32
    arithmetic where `widened`; int8 linears with `int8`), made ready as a session makes it (`pack`: one row by
    locret's kernel where built, else oneDNN's packed copy), and retaining heads of `heads_hidden` for it."""
    model = random_model(preset, torch.bfloat16 if widened else DTYPES[dtype])
    if widened:
        keep_bf16_weights(model)
    if int8:
        quantize_linears(model)
    torch.manual_seed(0)
    heads = RetainingHeads.for_model(model, heads_hidden).eval()
    if pack:
        take_rows(model)
        pack_linears(model)
    return model, heads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--heads-hidden", type=int, default=1024, help="the retaining heads' hidden width")
    parser.add_argument("--no-pack", action="store_true",
                        help="leave one-row products to torch (no kernel, no packing)")
    parser.add_argument("--fp32-weights", action="store_true",
                        help="in fp32, hold the weights in fp32 (else they stay bf16, as a bf16 checkpoint loads)")
    parser.add_argument("--int8", action="store_true", help="int8 linear weights, as `--load-8bit` quantizes them")
    args = parser.parse_args()

    widened = args.dtype == "fp32" and not args.fp32_weights
    model, heads = ready_model(args.preset, args.dtype, args.heads_hidden, widened, args.int8, not args.no_pack)
    engine, chunks, tokenizer = filled_engine(model, heads, args.budget, args.chunk, args.tokens, args.steps,
                                              timed_chunks)
    started = time.perf_counter()
    engine.read(islice(chunks, args.chunks))
    plain_prefill = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        engine.read(islice(chunks, args.chunks))
        wall = time.perf_counter() - started
    print(table(f"prefill chunk of {args.chunk} tokens", breakdown(prof, wall * 1e6), args.chunks, plain_prefill))

    first = engine.sampler.pick(engine.forward(tokenizer.encode("What is the pass key?"), score=False))
    started = time.perf_counter()
    engine.fork().decode(first)  # the same steps on a fork, unprofiled
    plain_decode = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        steps = engine.decode(first)[1]
        wall = time.perf_counter() - started
    print()
    print(table("decode step", breakdown(prof, wall * 1e6), steps, plain_decode))
    weights = ("int8 weights" if args.int8 else "bf16 weights") + " computing in fp32" if widened else args.dtype
    print(f"\n{args.preset} shape, random weights, {weights}, budget {args.budget}, chunk {args.chunk}, "
          f"heads hidden {args.heads_hidden}, "
          f"one-row products {'by torch' if args.no_pack else 'as a session runs them'}, "
          f"{torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
