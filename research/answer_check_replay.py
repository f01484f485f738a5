"""Asks the model, after it answers from the located windows, whether those windows state its answer, and whether
they answer the question at all: the model's own yes/no as a refusal signal beside `--unfound-in read`.

    python -m research.answer_check_replay --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct \\
        --sets natural-validation --documents 6 --out runs/q15-val-check.jsonl [--rows runs/val-say-1.5b.jsonl] \\
        [--load-int4]

For each question the windows of `--config` (a `benchmarks/reader_routes.py` configuration that locates in the
text) are located and read once with a full cache, as the shipped route reads them; three forks of that engine then
(1) answer the question as the route does (greedy, 32 tokens), (2) hear the question and that answer as earlier turns
and the follow-up CHECK ("stated") and (3) hear the question with `answerable.ANSWERABLE` appended ("answerable"), as
the answer setting `answerable_below` asks it. Each score is the model's share of yes against no
(`answerable.yes_share`; a share s is the log-odds margin log(s / (1 - s))). A row per question goes to `--out` (a
rerun skips the questions there). `--rows` names stored rows of the same questions: their answers are compared with
these (they should be the same). `--report` prints, for thresholds on each score and on the larger of the two (the
scores below which 10-50% of the rows fall, and those `--at` names), right / made up / not-stated refused when an
answer is also refused below the threshold.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import CONFIGS, add_dtype, natural_questions
from locret_cli.api import load_session
from locret_cli.api.answer_checks import unfound
from locret_cli.bench.tasks import NATURAL
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground
from locret_cli.core.answer.answerable import answerable_share, with_answerable_check, yes_share
from locret_cli.core.answer.reread import locate, read_windows
from locret_cli.inputs.prompt import conversation_ids

CHECK = "Is that answer stated in the text above? Reply only yes or no."
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)  # thresholds: the scores below which these shares of the rows fall


def replay(args) -> None:
    stored = {(r["set"], r["document"], r["question"]): r["answer"] for r in map(json.loads, args.rows.open())
              if r["config"] == args.config} if args.rows else {}
    session = load_session(args.model, device="cpu", dtype=args.dtype, load_int4=args.load_int4)
    answering = replace(session.plan(answer={"max_new_tokens": 32}).answer, **CONFIGS[args.config][0])
    for name, index, reading, numbers, question in pending_questions(args, session, answering):
        key, asked = (name, index, question.question), question.question
        spans, _, _ = locate(reading.engine, reading.tokenizer, reading.input_ids, reading.engine.pinned, asked, [],
                             answering)
        row = {"set": name, "document": index, "kind": question.kind, "question": asked, "windows": spans,
               **windows_answer(reading, spans, question, answering, numbers)}
        if key in stored:
            row["same_as_stored"] = stored[key] == row["answer"]
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")


def pending_questions(args, session, answering):
    """(set, document index, its Reading (the bounded read deferred), its numbers, question) for each question of
    `args.sets`' first `args.documents` documents that has no row in `args.out` yet."""
    done = {(r["set"], r["document"], r["question"]) for r in map(json.loads, args.out.open())} \
        if args.out.exists() else set()
    for name in args.sets.split(","):
        for index, (document, questions, _) in enumerate(natural_questions(NATURAL[name], args.documents)):
            reading = session.read(document, defer=True)
            numbers = reading.document_numbers() if answering.numbers_from_document else None
            for question in questions:
                if (name, index, question.question) not in done:
                    yield name, index, reading, numbers, question


def windows_answer(reading, spans: list[tuple[int, int]], question, answering, numbers) -> dict:
    """The answer from `spans` of `reading`'s document read whole, its verdicts as said, with `--unfound-in read`
    and refused, and the model's shares of yes to CHECK ("stated") and to `answerable.ANSWERABLE`."""
    engine, _ = read_windows(reading.engine, reading.tokenizer, reading.input_ids, spans, answering)
    return checked_answer(engine, reading, spans, question, numbers)[0]


def checked_answer(engine, reading, spans: list[tuple[int, int]], question, numbers) -> tuple[dict, list[int]]:
    """`windows_answer` on an `engine` that has read the windows `spans`: (its row, the answer's token ids)."""
    tokenizer, ids, asked, text = reading.tokenizer, reading.input_ids, question.question, reading.document_text()
    generation = engine.fork().answer(conversation_ids(tokenizer, [], asked), numbers=numbers)
    answer = tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
    windows = [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in spans]
    read = DocumentText(windows + [asked], [""] * (len(windows) + 1))
    refused = REFUSAL if unfound(ground(asked, answer, read)) else answer
    stated = engine.fork().forward(conversation_ids(tokenizer, [(asked, answer)], CHECK), score=False)
    answerable = answerable_share(engine, tokenizer, conversation_ids(tokenizer, [], with_answerable_check(asked)))
    return {"answer": answer, "verdict": question.verdict(answer, text),
            "wrefuse_verdict": question.verdict(refused, text), "wrefused": refused == REFUSAL,
            "stated": yes_share(tokenizer, stated), "answerable": answerable,
            "not_stated_verdict": question.verdict(REFUSAL, text)}, generation.token_ids


def report(path: Path, fixed: tuple[float, ...] = ()) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    same = [r["same_as_stored"] for r in rows if "same_as_stored" in r]
    print(f"{len(rows)} questions; answers the same as the stored rows': {sum(same)}/{len(same)}")
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"| refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    rules = [("windows lack its words (shipped)", lambda r: r["wrefused"])]
    for score, of in (("stated", lambda r: r["stated"]), ("answerable", lambda r: r["answerable"]),
                      ("both", lambda r: max(r["stated"], r["answerable"]))):
        values = sorted(of(r) for r in rows)
        chosen = fixed if score == "answerable" else ()
        for t in sorted({round(values[int(share * len(values))], 3) for share in SHARES} | set(chosen)):
            rules.append((f"shipped, or {score} < {t:g}", lambda r, of=of, t=t: r["wrefused"] or of(r) < t))
    for label, refuses in rules:
        print(table_row(label, rows, refuses, kinds))


def table_row(label: str, rows: list[dict], refuses, kinds: list[str]) -> str:
    """A report's row: right / made up / bound wrong / not-stated refused and right by kind, when the answers of
    `rows` for which `refuses` is true are refused."""
    verdicts = [r["not_stated_verdict"] if refuses(r) else r["verdict"] for r in rows]
    unstated = [v for r, v in zip(rows, verdicts) if r["kind"] == "not-stated"]
    by_kind = [f"{sum(v == 'right' for r, v in zip(rows, verdicts) if r['kind'] == kind)}/"
               f"{sum(r['kind'] == kind for r in rows)}" for kind in kinds]
    return (f"| {label} | {verdicts.count('right')}/{len(rows)} | {verdicts.count('made_up')} | "
            f"{verdicts.count('bound_wrong')} | {unstated.count('right')}/{len(unstated)} | {', '.join(by_kind)} |")


def replay_parser(description: str) -> argparse.ArgumentParser:
    """The options a replay of the natural questions takes: the model, sets, documents, configuration, `--out` and
    `--report`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model")
    parser.add_argument("--sets", default="natural-validation")
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--config", default="bm25-3x1024")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", action="store_true")
    add_dtype(parser)
    return parser


def main() -> None:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path)
    parser.add_argument("--load-int4", action="store_true", help="the model's linear weights in 4 bits")
    parser.add_argument("--at", default="", help="comma-separated thresholds of answerable to report beside the "
                                                "rows' own percentiles (a threshold chosen on another half)")
    args = parser.parse_args()
    fixed = tuple(float(t) for t in args.at.split(",") if t)
    report(args.out, fixed) if args.report else replay(args)


if __name__ == "__main__":
    main()
