"""Every question of `samples/questions.jsonl`, asked of one saved read of the handbook by each way of answering.

    locret read samples/handbook.pdf -o runs/h.locret --model smollm2
    python -m benchmarks.smollm2.handbook_routes runs/h.locret

The read is loaded once, and each answer is made on a fork of it. Each question is asked by the recorded route
(windows the question's words locate, the bounded cache where they fail), by one bounded read with the reader
(`--reread 0`) and by one bounded read without it. Prints one markdown table: each answer, whether it holds the
expected value (`contains_match`, as the bench scores), and the route that answered.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from locret_cli.api import load_session
from locret_cli.bench.scoring import contains_match

WAYS = {"recorded route": ({}, True), "one read, reader": ({"reread": 0}, True),
        "one read, no reader": ({"reread": 0}, False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saved", help="a .locret file of samples/handbook.pdf read with --model smollm2")
    parser.add_argument("--questions", type=Path, default=Path("samples/questions.jsonl"))
    parser.add_argument("--reader", help="a reader directory (default: the one shipped with the model)")
    args = parser.parse_args()

    questions = [json.loads(line) for line in args.questions.read_text().splitlines() if line.strip()]
    session = load_session("smollm2", reader=args.reader)
    reading = session.open(args.saved)
    right = dict.fromkeys(WAYS, 0)
    print("| question | expected | " + " | ".join(WAYS) + " |")
    print("|---|---|" + "---|" * len(WAYS))
    for item in questions:
        cells = []
        for way, (given, with_reader) in WAYS.items():
            reading.engine = reading.engine.with_reader(session.reader if with_reader else None)
            result = reading.ask(item["question"], session.plan(answer={**given}).answer, sources=0)
            hit = contains_match(result.answer, item["answer"])
            right[way] += hit
            cells.append(f"{'✓' if hit else '✗'} {result.answer} ({result.route})")
        print(f"| {item['question']} | {item['answer']} | " + " | ".join(cells) + " |")
    print("| right | | " + " | ".join(f"{right[way]} of {len(questions)}" for way in WAYS) + " |")


if __name__ == "__main__":
    main()
