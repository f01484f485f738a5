"""A model's decode with its weights as stored beside `--load-8bit`'s int8 and `--load-int4`'s 4-bit weights, in one
process, turn by turn; 4-bit weights with locret's row kernel or with torch's product (the `int4-torch` kinds), a
step's attention by locret's kernel, where one is installed, or by torch's (the `torch-attention` kinds), and a
question's rows by the rows kernels or through the widened weights (the `question-widened` kinds).

    python benchmarks/int8_decode_side_by_side.py --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct > int8.md

Each session loads in this process (the quantized ones from the same checkpoint; `--weights` picks them) and reads the
same excerpt of the handbook (`samples/handbook.txt`, the lines around the gate code, with a full cache: the excerpt
is shorter than the budget). Then each asks the same questions in turns, one session after the other, `--rounds`
times, answering from the read cache alone (`--reread 0`), after one answer each that is not counted (a compiled step
compiles at its first): pairing keeps the ratio meaningful on a host whose speed drifts. Prints a markdown table of
each session's median decode rate, the median of its paired ratios to the weights as stored, the median time from
the question to its first answer token (its prefill, as in a `chat` turn), and each answer, so that a changed answer
shows. Run nothing else meanwhile; no figure here is a memory figure (every model is resident).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from pathlib import Path
from unittest import mock

from locret_cli.api import ModelSpec, load_session
from locret_cli.core.attention.over_cache import torchs_attention
from locret_cli.runtime import int4_linear, native_rows
from locret_cli.settings import AnswerSettings

HANDBOOK = Path(__file__).resolve().parents[1] / "samples" / "handbook.txt"
WEIGHTS = {"stored": ("as stored", {}), "int8": ("int8 (`--load-8bit`)", {"load_8bit": True}),
           "int4": ("int4 (`--load-int4`)", {"load_int4": True}),
           "stored-compiled": ("as stored, `--compile-decode`", {"compile_decode": True}),
           "int8-compiled": ("int8, `--compile-decode`", {"load_8bit": True, "compile_decode": True}),
           "int4-compiled": ("int4, `--compile-decode`", {"load_int4": True, "compile_decode": True}),
           "int4-torch": ("int4, torch's product", {"load_int4": True}),
           "int4-torch-compiled": ("int4, torch's product, `--compile-decode`", {"load_int4": True,
                                                                                 "compile_decode": True}),
           "stored-torch-attention": ("as stored, torch's attention", {}),
           "int4-compiled-torch-attention": ("int4, `--compile-decode`, torch's attention", {"load_int4": True,
                                                                                          "compile_decode": True}),
           "stored-question-widened": ("as stored, a question's rows widened", {}),
           "int8-question-widened": ("int8, a question's rows widened", {"load_8bit": True}),
           "int4-question-widened": ("int4, a question's rows widened", {"load_int4": True})}
QUESTIONS = ("What is the gate code of the north depot?", "What did the archivist count behind the granary?",
             "Who questioned the signal tower beside the quarry?")


def product_of(label: str):
    """Where a row's 4-bit product and a step's attention run: torch's int4 product for the `int4-torch` kinds
    (locret's kernel declines), torch's attention for the `torch-attention` kinds (no attention kernel installed),
    else wherever the session would run them."""
    if "torch's product" in label:
        return mock.patch.object(int4_linear, "int4_rows_product", lambda *tensors, **most: None)
    if "torch's attention" in label:
        return torchs_attention()
    if "a question's rows widened" in label:  # as before questions' rows went to the kernels: only a step's did
        return mock.patch.object(native_rows, "QUESTION_ROWS", native_rows.ROWS)
    return contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", default="160:200", help="the handbook's lines to read, FIRST:LAST")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--weights", default="stored,int8,int4", help=f"comma-separated, of: {', '.join(WEIGHTS)} "
                        "(a compiled step compiles at its first answer)")
    args = parser.parse_args()
    first, last = (int(n) for n in args.lines.split(":"))
    with tempfile.TemporaryDirectory() as folder:
        excerpt = Path(folder) / "excerpt.txt"
        excerpt.write_text("".join(HANDBOOK.read_text(encoding="utf-8").splitlines(keepends=True)[first:last]))
        readings = {}
        for kind in args.weights.split(","):
            label, options = WEIGHTS[kind]
            session = load_session(ModelSpec(args.model, device="cpu", **options))
            readings[label] = session.read(str(excerpt))
    answering = AnswerSettings(max_new_tokens=args.max_new_tokens, reread=0)
    for label, reading in readings.items():  # one answer each, not counted: a compiled step compiles at its first
        with product_of(label):
            reading.ask(QUESTIONS[0], answering, sources=0)
    rates: dict[str, list[float]] = {label: [] for label in readings}
    questions_s: dict[str, list[float]] = {label: [] for label in readings}  # the question's prefill, first token
    answers: dict[str, dict[str, str]] = {label: {} for label in readings}
    for _ in range(args.rounds):
        for question in QUESTIONS:
            for label, reading in readings.items():
                with product_of(label):
                    result = reading.ask(question, answering, sources=0)
                rates[label].append(result.speed.decode_tokens_per_s or 0.0)
                questions_s[label].append(result.speed.answer_s - result.speed.decode_s)
                answers[label][question] = result.answer
    stored = rates[next(iter(rates))]
    print(f"| weights | decode tok/s, median of {len(stored)} answers | paired ratio to the first row "
          "| question to first token, median s | compute |")
    print("|---|---:|---:|---:|---|")
    for label, reading in readings.items():
        ratio = statistics.median(b / a for a, b in zip(stored, rates[label]) if a)
        print(f"| {label} | {statistics.median(rates[label]):.2f} | {ratio:.2f} | "
              f"{statistics.median(questions_s[label]):.2f} | {reading.compute} |")
    print()
    print("| question | " + " | ".join(readings) + " |")
    print("|---|" + "---|" * len(readings))
    for question in QUESTIONS:
        print(f"| {question} | " + " | ".join(answers[label][question] for label in readings) + " |")


if __name__ == "__main__":
    main()
