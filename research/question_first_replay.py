"""The question read before the re-read windows as well as after them: does the model read located text better when
it knows what it is reading for?

The shipped route reads its three BM25 windows whole after the prompt's head and asks the question after them, so
the windows' entries are computed without the question. Here the same windows are read after the head and
`Question: ...` (the user's question, then `INTRODUCTION`), and answered two ways from that one engine:

- `first`: the question after the windows as the shipped route asks it;
- `first+words`: the same with `OWN_WORDS` appended to the question (the answer in the text's own words, so that
  `--unfound-in read` finds what a right answer says).

    python -m research.question_first_replay --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct \\
        --sets natural-validation --documents 6 --out runs/qfirst/q15-val.jsonl [--rows runs/pairs/q15-val.jsonl]
    python -m research.question_first_replay --out runs/qfirst/q15-val.jsonl --report

One row per question and variant, with the verdicts as said and with `--unfound-in read`, and the model's share of
yes to `answerable.ANSWERABLE` asked on the same engine. `--rows` names stored rows of the shipped route (rule bm25,
as `research.locate_pairs` writes them): `--report` prints them beside the variants, over the questions both hold.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import CONFIGS
from locret_cli.api import load_session
from locret_cli.api.answer_checks import unfound
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground
from locret_cli.core.answer.answerable import answerable_share, with_answerable_check
from locret_cli.core.answer.reread import locate, read_windows
from locret_cli.core.engine import Engine
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.inputs.tokenizer import encode_text
from research.answer_check_replay import pending_questions, replay_parser, table_row

INTRODUCTION = "Read the text below, then answer this question from it."
OWN_WORDS = "Answer in one sentence, in the words of the text above."
VARIANTS = ("first", "first+words")
THRESHOLDS = (0.5, 0.6, 0.65, 0.7, 0.725, 0.75, 0.8)


def read_after_question(reading, spans: list[tuple[int, int]], asked: str, answering) -> Engine:
    """An engine that has read the prompt's head, the question, and the windows `spans` whole (full cache)."""
    lead = encode_text(reading.tokenizer, f"Question: {asked.strip()}\n\n{INTRODUCTION}")
    return read_windows(reading.engine, reading.tokenizer, reading.input_ids, spans, answering, lead)[0]


def variant_rows(reading, spans, question, numbers, answering) -> list[dict]:
    """One row per variant, answered from one engine that read the question before the windows."""
    tokenizer, ids, asked, text = reading.tokenizer, reading.input_ids, question.question, reading.document_text()
    engine = read_after_question(reading, spans, asked, answering)
    windows = [tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in spans]
    read = DocumentText(windows + [asked], [""] * (len(windows) + 1))
    share = answerable_share(engine, tokenizer, conversation_ids(tokenizer, [], with_answerable_check(asked)))
    rows = []
    for variant, prompt in zip(VARIANTS, (asked, f"{asked.strip()}\n\n{OWN_WORDS}")):
        generation = engine.fork().answer(conversation_ids(tokenizer, [], prompt), numbers=numbers)
        answer = tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
        refused = REFUSAL if unfound(ground(asked, answer, read)) else answer
        rows.append({"variant": variant, "answer": answer, "verdict": question.verdict(answer, text),
                     "wrefuse_verdict": question.verdict(refused, text), "wrefused": refused == REFUSAL,
                     "answerable": share, "not_stated_verdict": question.verdict(REFUSAL, text)})
    return rows


def replay(args) -> None:
    session = load_session(args.model, device="cpu", dtype=args.dtype)
    answering = replace(session.plan(answer={"max_new_tokens": 32}).answer, **CONFIGS[args.config][0])
    for name, index, reading, numbers, question in pending_questions(args, session, answering):
        spans, _, _ = locate(reading.engine, reading.tokenizer, reading.input_ids, reading.engine.pinned,
                             question.question, [], answering)
        head = {"set": name, "document": index, "kind": question.kind, "question": question.question,
                "windows": spans}
        rows = [{**head, **row} for row in variant_rows(reading, spans, question, numbers, answering)]
        with args.out.open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)


def report(path: Path, stored: Path | None) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    asked = {(r["set"], r["document"], r["question"]) for r in rows}
    groups = [(v, [r for r in rows if r["variant"] == v]) for v in VARIANTS]
    shipped = {}
    if stored:
        shipped = {(r["set"], r["document"], r["question"]): r for r in map(json.loads, stored.open())
                   if r.get("rule", "bm25") == "bm25" and (r["set"], r["document"], r["question"]) in asked}
        groups.insert(0, ("shipped (stored)", list(shipped.values())))
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"| variant, refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    for label, group in groups:
        print(table_row(f"{label}, as said", group, lambda r: False, kinds))
        print(table_row(f"{label}, `--unfound-in read`", group, lambda r: r["wrefused"], kinds))
        for t in THRESHOLDS:
            print(table_row(f"{label}, and answerable < {t:g}", group,
                            lambda r, t=t: r["wrefused"] or r["answerable"] < t, kinds))
        if label in VARIANTS and shipped:  # the check asked of the windows read as shipped (the stored rows')
            share = {id(r): shipped[(r["set"], r["document"], r["question"])]["answerable"] for r in group}
            for t in THRESHOLDS:
                print(table_row(f"{label}, and the shipped windows' answerable < {t:g}", group,
                                lambda r, t=t, share=share: r["wrefused"] or share[id(r)] < t, kinds))


def main() -> None:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, help="stored rows of the shipped route, to report beside")
    args = parser.parse_args()
    report(args.out, args.rows) if args.report else replay(args)


if __name__ == "__main__":
    main()
