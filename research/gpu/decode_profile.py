"""Where a decode step's time goes on a GPU: the first answer over a read against a second one, and a profile.

    python -m research.gpu.decode_profile --arch smollm2-135m --tokens 16384 --policy locret

A random-weights model of the shape reads the bench's needle document, then answers its question three times. Prints
each answer's decode steps and milliseconds per step (the first pays for every shape it meets first; the bench
measures only first answers), then the profiler's top ops of a fourth, by their own CPU time and by CUDA time.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from locret_cli.api import load_session
from locret_cli.bench.tasks import generated_samples
from locret_cli.models.spec import ModelSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="smollm2-135m")
    parser.add_argument("--policy", default="locret")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()

    session = load_session(ModelSpec(arch=args.arch, policy=args.policy))
    sample = generated_samples("needle", session.loaded.tokenizer, args.tokens, 1)[0]
    question = sample.questions[0].question
    settings = session.plan(read={"budget": args.budget}).read
    reading = session.read(sample.document, settings, force=True, questions=[question])
    answering = session.plan(answer={"max_new_tokens": args.steps, "stop_repeats": 0, "reread": 0}).answer
    print(f"{args.arch}, {args.policy}, {args.tokens} tokens, device {session.loaded.model.device}")
    for answer in ("first", "second", "third"):
        result = reading.ask(question, answering, sources=0)
        speed = result.speed
        per_step = 1000 * speed.decode_s / max(speed.decode_steps, 1)
        print(f"{answer} answer: {speed.decode_steps} steps, {per_step:.1f} ms a step, "
              f"time to first token {speed.time_to_first_token_s:.2f} s")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        reading.ask(question, answering, sources=0)
    averages = prof.key_averages()
    print(averages.table(sort_by="self_cpu_time_total", row_limit=25))
    if torch.cuda.is_available():
        print(averages.table(sort_by="self_cuda_time_total", row_limit=15))


if __name__ == "__main__":
    main()
