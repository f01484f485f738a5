"""The natural task's closed-book control: each question asked with no document, to show what a model knows by heart.

A question answered right here tells nothing about reading. Each question is asked of a one-line document that says
nothing ("No document was given."), with the model's own chat template, and its answer gets the bench's verdict
(`bench/scoring.py`) against the question's real document, so an answer from memory that the document holds counts
as right, and one it does not hold as made up. Rows go to --out as they finish; a rerun skips those there.

    python -m benchmarks.natural_closed_book --model runs/qwen0.5b/qwen2.5-coder-0.5b-instruct \\
        --out runs/natural/closed-qwen0.5b.jsonl
    python -m benchmarks.natural_closed_book --out runs/natural/closed-qwen0.5b.jsonl --report
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from locret_cli.api import load_session
from locret_cli.bench import natural
from locret_cli.bench.tasks import Question
from locret_cli.checks.grounding import DocumentText
from locret_cli.inputs.documents import text_document
from locret_cli.settings import AnswerSettings

EMPTY = "No document was given."


def run(model: str | None, out: Path, split: str | None) -> None:
    done = {(r["document"], r["question"]) for r in read_rows(out)}
    session = load_session(model, reads_with="full", device="cpu")
    reading = session.read(text_document(EMPTY, "closed-book"), {"policy": "full"})
    answering = AnswerSettings(max_new_tokens=48)
    for document in natural.load(split):
        text = DocumentText([document.text], [document.name])
        for asked in document.questions:
            if (document.name, asked.question) in done:
                continue
            question = Question(asked.question, asked.answer, kind=asked.kind, alternatives=asked.alternatives,
                                candidates=asked.candidates)
            answer = reading.ask(asked.question, answering, sources=0).answer
            row = {"model": session.loaded.name, "document": document.name, "split": asked.split,
                   "kind": asked.kind, "question": asked.question, "expected": asked.answer, "answer": answer,
                   "verdict": question.verdict(answer, text)}
            with out.open("a") as log:
                log.write(json.dumps(row) + "\n")


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def report(rows: list[dict]) -> str:
    """Markdown: each split's verdicts, stated questions and not-stated ones apart."""
    lines = ["| model | split | questions | right (stated) | right (not stated) | made up | bound wrong |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for (model, split) in sorted({(r["model"], r["split"]) for r in rows}):
        group = [r for r in rows if (r["model"], r["split"]) == (model, split)]
        counts = Counter(r["verdict"] for r in group)
        stated = sum(r["verdict"] == "right" and r["kind"] != "not-stated" for r in group)
        unstated = sum(r["verdict"] == "right" and r["kind"] == "not-stated" for r in group)
        lines.append(f"| {model} | {split} | {len(group)} | {stated} | {unstated} | {counts['made_up']} | "
                     f"{counts['bound_wrong']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="as for `locret ask --model` (default: the embedded model)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--split", choices=natural.SPLITS, help="one half only (default: both)")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if not args.report:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        run(args.model, args.out, args.split)
    print(report(read_rows(args.out)))


if __name__ == "__main__":
    main()
