"""Replays `--fallback unstated` on stored `reader_routes` rows, where the one-read+reader and fallback+reader
answers of each question are both stored (the bounded cache's answer under the fallback is the one-read+reader answer:
the same read, question and decoding settings).

    python -m research.smollm2.fallback_replay runs/v6-kinds128k.jsonl --set kinds --length 128000 --documents 20

Rebuilds each document's text as `reader_routes` does, grounds both answers against it, and prints, by kind, how
many questions the stored route (`unspecific`) and the replayed `unstated` answer right. Where the stored route
answered from the bounded cache, the windows' answer is not stored; it named nothing the document holds, which is
all either rule needs to know.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from benchmarks.reader_routes import dev_questions, kinds_questions
from locret_cli.api import load_session
from locret_cli.checks.grounding import DocumentText, ground


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("--set", choices=("dev", "kinds"), required=True)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--documents", type=int, required=True)
    parser.add_argument("--prose-packages", type=Path)
    args = parser.parse_args()
    rows = {(r["document"], r["question"], r["config"]): r for r in map(json.loads, args.rows.open())
            if r["set"] == args.set and r["length"] == args.length}
    if args.set == "dev":
        docs = dev_questions(args.length, args.documents, args.prose_packages)
    else:
        docs = kinds_questions(load_session("smollm2", heads_required=False), args.length, args.documents)
    tally = defaultdict(lambda: [0, 0, 0, 0])  # kind: questions, unspecific right, unstated right, changed
    for index, (document, questions, _) in enumerate(docs):
        text = DocumentText(["".join(segment.text for segment in document.segments())], ["all"])
        for question in questions:
            route, cache = (rows.get((index, question.question, c)) for c in ("fallback+reader", "one-read+reader"))
            if route is None or cache is None:
                continue
            windows = route["answer"] if route["route"] == "windows" else None
            held = 0 if windows is None else ground(question.question, windows, text).level
            shown = route
            if held < 2 and ground(question.question, cache["answer"], text).level > held:
                shown = cache
            counts = tally[question.kind]
            counts[0] += 1
            counts[1] += route["correct"]
            counts[2] += shown["correct"]
            counts[3] += shown["answer"] != route["answer"]
    print("| kind | questions | unspecific (stored) | unstated (replayed) | answers changed |")
    print("|---|---:|---:|---:|---:|")
    for kind, (n, old, new, changed) in sorted(tally.items()):
        print(f"| {kind} | {n} | {old} | {new} | {changed} |")
    total = [sum(c[i] for c in tally.values()) for i in range(4)]
    print(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[3]} |")


if __name__ == "__main__":
    main()
