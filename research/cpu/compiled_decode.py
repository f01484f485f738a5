"""Decode speed of the engine's eager step against torch.compile'd pieces of the model, on this CPU.

    python -m research.cpu.compiled_decode --mode packed --mode compile-mlp --mode compile-layers

A random-weights model of the preset's shape reads a generated document until its cache holds budget + chunk, then
decodes `--steps` tokens greedily on forks of the same read, once per mode:
- packed: the engine as shipped (one-row linears through oneDNN's packed bf16 weights, q/k/v and gate/up sharing one
  packed weight each);
- packed-separate: each linear with a packed weight of its own, as before the sharing;
- eager: plain `F.linear`;
- compile-mlp: each layer's MLP and two RMSNorms compiled (inductor, static shapes), linears unpacked;
- compile-mlp-freeze: the same with inductor's freezing, which packs the weights inside the graph;
- compile-layers: each whole decoder layer compiled (the cache and attention inside it).
Prints, per mode, the compile time (the first 2 steps), tok/s over three timed runs, and whether the greedy tokens
equal the packed run's. research/notes/2026-11-26-decode-and-reading-when-needed.md has the figures.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.profile_engine import filled_engine
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.transformers_internals import SIBLING_LINEARS
from locret_cli.models.arch import random_model
from locret_cli.runtime.packed_linear import pack_linears
from locret_cli.settings import AnswerSettings

MODES = ("packed", "packed-separate", "eager", "compile-mlp", "compile-mlp-freeze", "compile-layers")


def read_engine(model, budget: int, chunk: int, steps: int) -> tuple[Engine, int]:
    """An engine that has read budget + chunk tokens of a generated document (`profile_engine.filled_engine`, heads
    of hidden width 256), and the first answer token."""
    torch.manual_seed(0)
    heads = RetainingHeads.for_model(model, 256).eval()
    engine, _, tokenizer = filled_engine(model, heads, budget, chunk, 2 * (budget + chunk), steps - 1)
    return engine, engine.sampler.pick(engine.forward(tokenizer.encode("What is the pass key?"), score=False))


def prepare(model, mode: str) -> None:
    """Make `model` (fresh, unpacked) compute as `mode` says; compiling happens at the first step."""
    import torch._dynamo
    import torch._inductor.config

    if mode.startswith("packed"):
        pack_linears(model, SIBLING_LINEARS if mode == "packed" else ())
        return
    torch._dynamo.config.cache_size_limit = 256  # one entry per layer and shape
    torch._inductor.config.freezing = mode == "compile-mlp-freeze"
    for layer in model.model.layers if mode.startswith("compile") else []:
        if mode == "compile-layers":
            layer.compile(dynamic=False)
        else:
            for part in (layer.mlp, layer.input_layernorm, layer.post_attention_layernorm):
                part.compile(dynamic=False)


def measure(preset: str, mode: str, budget: int, chunk: int, steps: int) -> tuple[float, float, list[int]]:
    """(compile seconds, tok/s, greedy tokens) of `mode` on a fresh model of `preset`'s shape."""
    model = random_model(preset, torch.bfloat16)
    engine, first = read_engine(model, budget, chunk, steps)
    prepare(model, mode)
    started = time.perf_counter()
    warm = engine.fork(AnswerSettings(max_new_tokens=3))
    warm.decode(first)
    compiled_s = time.perf_counter() - started
    rates, tokens = [], []
    for _ in range(3):
        fork = engine.fork()
        started = time.perf_counter()
        tokens = fork.decode(first)[0]
        rates.append(len(tokens) / (time.perf_counter() - started))
    return compiled_s, max(rates), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--steps", type=int, default=65)
    args = parser.parse_args()
    reference = None
    for mode in args.mode or ["packed"]:
        compiled_s, rate, tokens = measure(args.preset, mode, args.budget, args.chunk, args.steps)
        reference = tokens if reference is None else reference
        print(f"{mode}: first steps {compiled_s:.1f} s, {rate:.1f} tok/s, tokens "
              f"{'the same' if tokens == reference else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
