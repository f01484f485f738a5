"""The corpus docs/measurements/batch.md measures `locret batch` on, and the check of its answers.

    python benchmarks/batch_corpus.py make /tmp/corpus            # 20 documents of 8K-32K tokens, 3 questions
    locret batch '/tmp/corpus/*.txt' --questions /tmp/corpus/questions.txt --out answers.jsonl
    python benchmarks/batch_corpus.py check /tmp/corpus answers.jsonl

Every document states a gate code, a radio channel and a pass key, each with its own value, at seeded depths, in
generated filler prose; the same three questions are asked of all of them. `check` counts rows, duplicates and
answers that state the document's value. Seeded: `make` always writes the same files.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from locret_cli.bench.synthetic import Fact
from recipes.sample_documents import document

QUESTIONS = ["What is the gate code of the north depot?", "What is the radio channel of the river station?",
             "What is the pass key?"]
TOKENS_PER_PARAGRAPH = 98  # the embedded tokenizer on this filler (samples/handbook.txt: 128,044 / 1,300)


def make(folder: Path, documents: int, low: int, high: int, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    key = {}
    for n in range(documents):
        values = [str(rng.randint(1000, 9999)), str(rng.randint(10, 99)), str(rng.randint(10000, 99999))]
        statements = [f"The gate code of the north depot is {values[0]}.",
                      f"The radio channel of the river station is {values[1]}.",
                      f"The pass key is {values[2]}. Remember it."]
        facts = [(Fact(s, q, v, "attribute"), rng.uniform(0.05, 0.95)) for s, q, v in zip(statements, QUESTIONS, values)]
        paragraphs = rng.randint(low, high) // TOKENS_PER_PARAGRAPH
        name = f"report-{n:02d}.txt"
        (folder / name).write_text(document(seed * 1000 + n, paragraphs, facts))
        key[name] = dict(zip(QUESTIONS, values))
    (folder / "questions.txt").write_text("\n".join(QUESTIONS) + "\n")
    (folder / "expected.json").write_text(json.dumps(key, indent=1) + "\n")
    print(f"wrote {documents} documents and questions.txt to {folder}")


def check(folder: Path, answers: Path) -> None:
    key = json.loads((folder / "expected.json").read_text())
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    keys = Counter(row["key"] for row in rows)
    right = sum(1 for row in rows if row["answer"] and
                row["answer"].rstrip(".").endswith(key[Path(row["source"]).name][row["question"]]))
    print(json.dumps({"rows": len(rows), "distinct": len(keys), "duplicated": sum(c - 1 for c in keys.values()),
                      "errors": sum(1 for row in rows if row["error"]), "right": right,
                      "expected_rows": len(key) * len(QUESTIONS)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make")
    made.add_argument("folder", type=Path)
    made.add_argument("--documents", type=int, default=20)
    made.add_argument("--min-tokens", type=int, default=8192)
    made.add_argument("--max-tokens", type=int, default=32768)
    made.add_argument("--seed", type=int, default=17)
    checked = commands.add_parser("check")
    checked.add_argument("folder", type=Path)
    checked.add_argument("answers", type=Path)
    args = parser.parse_args()
    if args.command == "make":
        make(args.folder, args.documents, args.min_tokens, args.max_tokens, args.seed)
    else:
        check(args.folder, args.answers)


if __name__ == "__main__":
    main()
