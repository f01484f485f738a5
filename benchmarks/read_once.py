"""Read once, ask many: the cost of reading, saving, loading and answering, and of citations.

    python benchmarks/read_once.py --source samples/handbook.pdf --questions samples/questions.jsonl --count 5
    python benchmarks/read_once.py --arch smollm2-135m --tokens 131072 --budget 1024 --max-new-tokens 32
    python benchmarks/read_once.py --context h.locret --model smollm2 --questions samples/questions.jsonl --count 10

With --source, the embedded model reads the document, the reading is saved to a temporary .locret file and loaded
back, and each question is answered from the loaded context, with and without sources. With --arch, a random-weights
model of that shape (byte-level tokenizer) reads --tokens of filler; answers are meaningless but every time is real.
With --context, a saved reading (`locret read`) is loaded with --model and only the answers are timed.
Prints a Markdown report. Nothing is warmed up but one short run that loads the kernels, and with --context not even
that: the medians leave the first answer's loading out.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from locret_cli.api import load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.bench.synthetic import paragraphs
from locret_cli.cli.report import format_sources
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.questions import load_questions
from locret_cli.models.spec import ModelSpec


def timed(call):
    started = time.perf_counter()
    value = call()
    return value, time.perf_counter() - started


def read_save_load(args) -> tuple:
    """Read the document (--source) or filler (--arch), save and load it, printing each step's time: (the loaded
    reading, the answer settings, the questions)."""
    if args.arch:
        session = load_session(ModelSpec(arch=args.arch))
        text = "\n\n".join(paragraphs(random.Random(0), args.tokens // 90))[: args.tokens]
        source, questions = text_document(text), ["What is the pass key?"]
    else:
        session = load_session()
        source, questions = args.source, load_questions(args.questions)[: args.count]
    settings = session.plan(read={"budget": args.budget}).read
    answering = session.plan(answer={"max_new_tokens": args.max_new_tokens}).answer
    session.read(text_document("Warm up. " * 200), settings, force=True).ask("Why?", answering)
    reading = session.read(source, settings, force=True)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "context.locret"
        saved, save_s = timed(lambda: save_reading(reading, path, session.heads))
        loaded, load_s = timed(lambda: session.open(str(path)))
    doc = reading.document
    print(f"model: {session.loaded.name}; {doc.tokens:,} tokens; budget {settings.budget}, chunk "
          f"{settings.chunk_size}; torch threads {torch.get_num_threads()}\n")
    print("| step | time | share of the read |\n|---|---:|---:|")
    print(f"| read the document ({doc.tokens / reading.read_s:,.0f} tok/s) | {reading.read_s:.2f} s | 100% |")
    print(f"| save ({saved.size_bytes / 2**20:.2f} MiB, {saved.bytes_per_entry:.1f} B per entry and head) | "
          f"{save_s * 1000:.1f} ms | {save_s / reading.read_s:.2%} |")
    print(f"| load | {load_s * 1000:.1f} ms | {load_s / reading.read_s:.2%} |")
    return loaded, answering, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source")
    parser.add_argument("--questions")
    parser.add_argument("--count", type=int, default=5)
    parser.add_argument("--arch")
    parser.add_argument("--context", help="a saved .locret: time its answers only")
    parser.add_argument("--model", help="the model of --context")
    parser.add_argument("--tokens", type=int, default=131072)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--repeats", type=int, default=21, help="answers timed per question, with and without sources")
    args = parser.parse_args()
    if args.context:
        session = load_session(args.model)
        loaded, questions = session.open(args.context), load_questions(args.questions)[: args.count]
        answering = session.plan(answer={"max_new_tokens": args.max_new_tokens}).answer
        print(f"model: {session.loaded.name}; {args.context}; torch threads {torch.get_num_threads()}\n")
        print("| step | time |\n|---|---:|")
    else:
        loaded, answering, questions = read_save_load(args)
    rows = []
    for question in questions:
        cited, plain = [], []
        for _ in range(args.repeats):  # interleaved, so drift in the machine's speed hits both alike
            cited.append(timed(lambda q=question: loaded.ask(q, answering)))
            plain.append(timed(lambda q=question: loaded.ask(q, answering, sources=0)))
        result = cited[0][0]
        with_s, without_s = statistics.median(t for _, t in cited), statistics.median(t for _, t in plain)
        decode_s = statistics.median(r.speed.decode_s for r, _ in plain)
        rows.append((question, result, with_s, without_s, decode_s))
        print(f"| answer: {question} | {with_s * 1000:.0f} ms |")
    print("\n| question | route | answer | first sources | answer with sources | without | cost / decode time |")
    print("|---|---|---|---|---:|---:|---:|")
    for question, result, with_s, without_s, decode_s in rows:
        cited = format_sources(result.sources[:2])
        print(f"| {question} | {result.route} | {result.answer[:60]} | {cited} | {with_s * 1000:.1f} ms | "
              f"{without_s * 1000:.1f} ms | {(with_s - without_s) / decode_s:+.1%} "
              f"({result.speed.decode_steps} steps) |")


if __name__ == "__main__":
    main()
