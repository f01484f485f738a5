"""Two ways of placing the re-read windows, answered side by side from one tokenization of each document: the
shipped three BM25 windows (`--locate bm25`), and the same with the last window centred instead on the passage whose
all-MiniLM-L6-v2 embedding is nearest the question's (`mixed_passages`). A question whose windows the
two share is answered once and counts for both.

    python -m research.locate_pairs --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --sets natural-validation \\
        --out runs/locate-pairs-1.5b-val.jsonl
    python -m research.locate_pairs --out runs/locate-pairs-1.5b-val.jsonl --report --at 0.725

Each row is `answer_check_replay.windows_answer` for one rule (`rule` bm25 or mixed; `shared`: the windows were the
same); a rerun skips the questions there. `--report` prints right / made up / bound wrong / not-stated refused by
kind for each rule, as said, with `--unfound-in read` (shipped), and with both that and `--answerable-below` at `--at`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import CONFIGS, add_dtype, natural_questions
from locret_cli.api import load_session
from locret_cli.bench.rankers import EmbeddingRanker, minilm_embed
from locret_cli.bench.tasks import NATURAL
from locret_cli.core.answer.locate import joined
from locret_cli.core.answer.passage_rank import best_passages, centred, passage_scores
from research.answer_check_replay import table_row, windows_answer

RULES = ("bm25", "mixed")


def mixed_passages(scores: list[float], similarity: list[float], spans: list[tuple[int, int]], count: int,
                   size: int, start: int, tokens: int) -> list[tuple[int, int]]:
    """`best_passages` for `count - 1` windows by BM25 `scores`, then the rest (one, or more where BM25 scores
    fewer passages) centred on the passages most `similar` to the question (an embedding's cosine) whose centres
    those do not hold."""
    lexical = centred(scores, spans, count - 1, size, start, tokens, [], floor=0.0)
    return joined(centred(similarity, spans, count - len(lexical), size, start, tokens, lexical,
                          floor=float("-inf")))


def replay(args) -> None:
    done = {(r["set"], r["document"], r["question"]) for r in map(json.loads, args.out.open())} \
        if args.out.exists() else set()
    session = load_session(args.model, device="cpu", dtype=args.dtype)
    answering = replace(session.plan(answer={"max_new_tokens": 32}).answer, **CONFIGS["bm25-3x1024"][0])
    ranker = EmbeddingRanker(minilm_embed())
    for name in args.sets.split(","):
        for index, (document, questions, _) in enumerate(natural_questions(NATURAL[name], args.documents)):
            reading = session.read(document, defer=True)
            tokenizer, ids, pinned = reading.tokenizer, reading.input_ids, reading.engine.pinned
            numbers = reading.document_numbers() if answering.numbers_from_document else None
            embedded = None
            for question in questions:
                key, asked = (name, index, question.question), question.question
                if key in done:
                    continue
                scores, spans = passage_scores(tokenizer, ids, asked, pinned, answering.reread_tokens)
                lexical = best_passages(scores, spans, answering.reread, answering.reread_tokens, pinned, len(ids))
                if embedded is None:
                    texts = [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in spans]
                    embedded = ranker.index(texts)
                mixed = mixed_passages(scores, ranker.scores(embedded, asked), spans, answering.reread,
                                       answering.reread_tokens, pinned, len(ids))
                shared = mixed == lexical
                rows = []
                for rule, windows in zip(RULES, (lexical, mixed)):
                    if rows and shared:
                        rows.append({**rows[0], "rule": rule})
                        continue
                    rows.append({"set": name, "document": index, "kind": question.kind, "question": asked,
                                 "rule": rule, "shared": shared, "windows": windows,
                                 **windows_answer(reading, windows, question, answering, numbers)})
                with args.out.open("a") as out:
                    out.writelines(json.dumps(row) + "\n" for row in rows)


def report(path: Path, at: float) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    shared = sum(r["shared"] for r in rows if r["rule"] == "bm25")
    print(f"{len(rows) // 2} questions, windows shared by both rules for {shared}")
    print(f"| rule, refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    views = (("as said", lambda r: False), ("`--unfound-in read`", lambda r: r["wrefused"]),
             (f"and answerable < {at:g}", lambda r: r["wrefused"] or r["answerable"] < at))
    for rule in RULES:
        ruled = [r for r in rows if r["rule"] == rule]
        for label, refuses in views:
            print(table_row(f"{rule}, {label}", ruled, refuses, kinds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    add_dtype(parser)
    parser.add_argument("--sets", default="natural-validation")
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--at", type=float, default=0.725, help="the answerable threshold to report")
    args = parser.parse_args()
    report(args.out, args.at) if args.report else replay(args)


if __name__ == "__main__":
    main()
