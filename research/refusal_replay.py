"""Replays `--refuse-unfound` on stored `reader_routes` rows of the natural task, with the answer's content looked for
in other texts than the whole document: the windows the answer read again, or those and the question (as
`--unfound-in read` does).

    python -m research.refusal_replay runs/q15-val-bm25.jsonl --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct \
        --sets natural-validation --documents 6

The windows are not stored in a row; they are located again from the document's tokens, as the configuration
located them (`--locate words` and `bm25` need nothing but the tokens and the question, so they come out the same).
Prints, per configuration and scope, right / made up / bound wrong / not-stated refused, and by kind.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import CONFIGS, add_dtype, natural_questions
from locret_cli.api import load_session
from locret_cli.api.answer_checks import unfound
from locret_cli.bench.tasks import NATURAL
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground
from locret_cli.core.answer.reread import locate
from locret_cli.settings import TEXT_LOCATES

SCOPES = ("as said", "document", "read", "read+question")


def scoped(scope: str, question: str, windows: list[str], document: DocumentText) -> DocumentText | None:
    """The text an answer's content is looked for in, for `scope` (None: not looked for)."""
    if scope == "as said":
        return None
    if scope == "document":
        return document
    return DocumentText(windows + ([question] if scope == "read+question" else []), [""] * (len(windows) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path)
    parser.add_argument("--model", required=True)
    add_dtype(parser)
    parser.add_argument("--sets", default="natural-validation")
    parser.add_argument("--documents", type=int, default=6)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.rows.open() if line.strip()]
    session = load_session(args.model, device="cpu", dtype=args.dtype)
    base = session.plan(answer={"max_new_tokens": 32}).answer
    tally = defaultdict(lambda: defaultdict(int))  # (config, scope): counts
    for name in args.sets.split(","):
        for index, (document, questions, _) in enumerate(natural_questions(NATURAL[name], args.documents)):
            reading = session.read(document, defer=True)
            text, ids = reading.document_text(), reading.input_ids
            asked = {q.question: q for q in questions}
            for row in rows:
                changed = CONFIGS.get(row["config"], ({},))[0]
                if row["set"] != name or row["document"] != index or changed.get("locate") not in TEXT_LOCATES:
                    continue
                question = asked[row["question"]]
                answering = replace(base, **changed)
                spans, _, _ = locate(reading.engine, reading.tokenizer, ids, reading.engine.pinned, question.question,
                                     [], answering)
                windows = [reading.tokenizer.decode(ids[a:b].tolist(), skip_special_tokens=True) for a, b in spans]
                for scope in SCOPES:
                    looked = scoped(scope, question.question, windows, text)
                    refused = looked is not None and unfound(ground(question.question, row["answer"], looked))
                    verdict = question.verdict(REFUSAL if refused else row["answer"], text)
                    counts = tally[(row["config"], scope)]
                    counts["asked"] += 1
                    counts[verdict] += 1
                    counts[f"{question.kind}:{verdict == 'right'}"] += 1
    kinds = sorted({key.split(":")[0] for c in tally.values() for key in c if ":" in key})
    print("| configuration | refusal looks in | right | made up | bound wrong | " + " | ".join(kinds) + " |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(kinds))
    for (config, scope), c in sorted(tally.items()):
        cells = [f"{c[f'{k}:True']}/{c[f'{k}:True'] + c[f'{k}:False']}" for k in kinds]
        print(f"| {config} | {scope} | {c['right']}/{c['asked']} | {c['made_up']} | {c['bound_wrong']} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
