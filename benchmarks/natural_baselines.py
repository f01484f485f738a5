"""The baselines of `locret bench --baselines` on chosen natural documents, recorded as reader_routes records a read.

Each question of each chosen document is answered by the same model from what a baseline row reads
(`locret_cli/bench/baselines.py`: the top passages by all-MiniLM-L6-v2 or BM25, or the window around the answer),
with a full cache and the answer settings reader_routes asks with (32 new tokens, the model's recorded settings, no
window read again). Rows carry reader_routes' fields, so its report puts them beside the routes of a read:

    CONFIG          what the model said, judged against the whole document
    CONFIG+strict   what `--strict` shows (grounded in the text the row read)
    CONFIG+refuse   what `--refuse-unfound` shows: withheld where some specific word of the answer is nowhere in the
                    text the row read

Rows go to --out as each question finishes; a rerun skips the (document, row, question) there.

    python -m benchmarks.natural_baselines --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct --only setuptools \\
        --baselines rag-minilm,rag-bm25,passage-oracle:tokens=3072 --out runs/q15-setuptools-baselines.jsonl
    python -m benchmarks.reader_routes --report --out runs/q15-setuptools-baselines.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import add_dtype, answer_views, read_rows, report
from locret_cli.api import Session, load_session
from locret_cli.bench.baselines import baseline_readings, baseline_variant
from locret_cli.bench.rag import RAG_TOKENS
from locret_cli.bench.tasks import NATURAL, natural_samples
from locret_cli.core.measure import peak_memory

ROW_LENGTH = 32000  # reader_routes' row label for natural documents (its --lengths default): rows group together


def run(session: Session, split_set: str, only: set[str] | None, rows: list[str], out: Path,
        tokens: int = RAG_TOKENS) -> None:
    """Ask every question of `split_set`'s documents (those named in `only`, where given) under each baseline row."""
    done = {(r["document"], r["config"], r["question"]) for r in read_rows(out)}
    samples = [(i, s) for i, s in enumerate(natural_samples(NATURAL[split_set])) if not only or s.document.name in only]
    plan = session.plan(read={"policy": "full"}, answer={"max_new_tokens": 32, "reread": 0})
    answering = replace(plan.answer, strict=True)  # the model's answer is kept in the grounding's `withheld`
    for row in rows:
        baseline = baseline_variant(row, tokens)
        if reason := baseline.missing():
            raise SystemExit(f"{row}: {reason}")
        for index, sample in samples:
            todo = [q for q in sample.questions if (index, row, q.question) not in done]
            if not todo:
                continue
            asked = replace(sample, questions=todo)
            right = 0
            for step in baseline_readings(session, baseline, [asked], plan.read):
                question = step.question
                result = step.reading.ask(question.question, answering, sources=0)
                views = answer_views(question, result, step.judged)  # judged against the whole document
                right += views["correct"]
                record = {"set": split_set, "length": ROW_LENGTH, "policy": "full", "document": index,
                          "config": row, **views, "route": "baseline",
                          "tokens": step.document_tokens, "read_tokens": result.document.tokens,
                          "read_s": step.reading.read_s + step.before_s,
                          "peak_bytes": peak_memory(session.loaded.model.device)[0],
                          "settings": baseline.settings(), "finished_at": time.time()}
                with out.open("a") as log:
                    log.write(json.dumps(record) + "\n")
            print(f"{split_set} {sample.document.name} {row}: {right}/{len(todo)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="smollm2")
    add_dtype(parser)
    parser.add_argument("--sets", default="natural", choices=tuple(NATURAL))
    parser.add_argument("--only", help="these documents only (names, comma-separated; rows keep their index)")
    parser.add_argument("--baselines", default="rag-minilm,rag-bm25,passage-oracle:tokens=3072")
    parser.add_argument("--rag-tokens", type=int, default=RAG_TOKENS, help="a row's cap unless it gives its own")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if not args.report:
        session = load_session(args.model, device="cpu", dtype=args.dtype, reads_with="full")
        run(session, args.sets, set(args.only.split(",")) if args.only else None, args.baselines.split(","),
            args.out, args.rag_tokens)
    print(report(read_rows(args.out)))


if __name__ == "__main__":
    main()
