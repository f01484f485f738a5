"""Decode speed with locret's own decode step (`core/answer/decode_step.py`) against transformers' forward, the own step
with locret's attention kernel (`runtime/native_attention.py`, where it is built), and the step compiled whole
(`core/answer/compiled_step.py`, `--compile-decode`) with and without the kernel, side by side in one process: the same
read, forked, answered in turn by each, several rounds (the first, which compiles, left out).

    python benchmarks/decode_step.py --budget 1024 --budget 4096            # SmolLM2-135M shape, bf16
    python benchmarks/decode_step.py --budget 1024 --budget 4096 --load-8bit

Random weights, so the answer means nothing; the tokens of the own step and transformers' must be the same, and the
script says so, and whether the kernel's rounding and the compiled step gave the same tokens too.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from locret_cli.core.answer.compiled_step import CompiledStep
from locret_cli.core.answer.decode_step import DecodeStep
from locret_cli.core.attention.over_cache import torchs_attention, use_attention_kernel
from locret_cli.core.engine import Engine
from locret_cli.core.policies import make_policy
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.models.arch import random_session_parts
from locret_cli.runtime.dtype_probe import cpu_name
from locret_cli.runtime.native_attention import built_kernel
from locret_cli.settings import AnswerSettings, ReadSettings


def rates(preset: str, budget: int, load_8bit: bool, steps: int, rounds: int) -> tuple[dict[str, list[float]], dict,
                                                                                     float]:
    """(tok/s by way of decoding, tokens by way, seconds of the compiled step's first answer) after reading
    2 × budget + 1,024 random tokens with torch's attention kernels."""
    loaded, heads = random_session_parts(preset, load_8bit=load_8bit)
    model = loaded.model
    engine = Engine(model, make_policy("locret", model, heads), ReadSettings(budget=budget, chunk_size=1024,
                                                                            stabilizers=64), PromptTokens(stop_ids=frozenset()), answering=AnswerSettings(max_new_tokens=steps + 1))
    tokens = 2 * budget + 1024
    ids = torch.randint(0, model.config.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    for start in range(0, tokens, 1024):
        engine.prefill_chunk(ids[start:start + 1024])
    kernel = built_kernel()
    own, compiled = DecodeStep(model), CompiledStep(model)
    ways = {"own": (own, None), "transformers": (None, None), "compiled": (compiled, None)}
    if kernel:
        ways |= {"own, locret's kernel": (own, kernel), "compiled, locret's kernel": (compiled, kernel)}
    measured, answers, first_answer_s = {name: [] for name in ways}, {}, 0.0
    for _ in range(rounds + 1):  # the first round warms every way up and is left out
        for name, (step, attention) in ways.items():
            fork = engine.fork()
            fork.step = step
            with torchs_attention():
                use_attention_kernel(torch.bfloat16, attention)
                started = time.perf_counter()
                answer = fork.answer([5, 6, 7])
                first_answer_s = first_answer_s or (time.perf_counter() - started if step is compiled else 0.0)
            measured[name].append(answer.decode_steps / answer.decode_s)
            answers[name] = answer.token_ids
    return {name: rates[1:] for name, rates in measured.items()}, answers, first_answer_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--budget", type=int, action="append", help="repeat for more rows (default: 1024)")
    parser.add_argument("--load-8bit", action="store_true")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(f"{args.preset}, {'int8' if args.load_8bit else 'bf16/auto'} linears, {cpu_name()}, "
          f"{torch.get_num_threads()} threads; median of {args.rounds} rounds, tok/s")
    print("| budget | transformers | own step | its tokens | compiled step | its tokens | own step, locret's kernel | "
          "compiled, locret's kernel | its tokens (against the own step's with the kernel) | first compiled answer |")
    print("|---:|---:|---:|---|---:|---|---:|---:|---|---:|")
    for budget in args.budget or [1024]:
        measured, answers, first_answer_s = rates(args.preset, budget, args.load_8bit, args.steps, args.rounds)
        cells = [f"{budget:,}"]
        for name, reference in (("transformers", None), ("own", "transformers"), ("compiled", "transformers"),
                                ("own, locret's kernel", None), ("compiled, locret's kernel", "own, locret's kernel")):
            if name not in measured:
                cells += ["not built here"] + (["-"] if reference else [])
                continue
            cells.append(f"{statistics.median(measured[name]):.1f}")
            if reference:
                cells.append("the same" if answers[name] == answers[reference] else "OTHER")
        print("| " + " | ".join(cells) + f" | {first_answer_s:.1f} s |")


if __name__ == "__main__":
    main()
