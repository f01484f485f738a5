"""Where a natural replay's answers are lost: in the locating (the windows read do not hold the answer), in the
reading (they hold it and the model says something else), or in the refusal (the model says it and the shipped
checks withhold it: `--unfound-in read`, and the answerable share under `--at`). No language model runs: the rows
of `research.answer_check_replay` (or `sample_agreement_replay`) hold each question's windows, and the document is
tokenized again as a read tokenizes it, with the model's tokenizer.

    python -m research.row_audit --rows runs/refusal/q15-val.jsonl --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct

A stated question's windows hold its answer where their decoded text contains the answer or an accepted form whole
(`scoring.contains_match`). `--list` prints the rows of one loss (`locating`, `reading` or `refusal`).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from benchmarks.reader_routes import natural_questions
from locret_cli.bench.scoring import contains_match
from locret_cli.bench.tasks import NATURAL
from locret_cli.inputs.documents import token_chunks
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.models.loading import load_tokenizer

LOSSES = ("locating", "reading", "refusal")


def document_ids(document, tokenizer) -> list[int]:
    """The document's token ids as a read holds them: the prompt's head, then the document tokenized chunk by chunk
    (the chunk size does not change the ids)."""
    head = prompt_layout(tokenizer).head_ids
    return [i for chunk in token_chunks(document, tokenizer, 1024, head) for i in chunk.ids]


def held(windows: list[str], question) -> bool:
    """Whether the windows' text holds the question's answer, or an accepted form of it, whole."""
    return any(contains_match(text, form) for text in windows for form in (question.answer, *question.alternatives))


def lost_to(row: dict, has: bool, below: float) -> str | None:
    """Where a stated question's shipped answer was lost (None: it is right): `locating` where the windows do not
    hold the answer, else `refusal` where the answer as said is right, else `reading`."""
    if row["verdict"] == "right" and not (row["wrefused"] or row["answerable"] < below):
        return None
    return "locating" if not has else "refusal" if row["verdict"] == "right" else "reading"


def audited(rows: list[dict], tokenizer, below: float) -> list[dict]:
    """Each stated question's row with `held` and `loss` (None where the shipped answer is right: not withheld by
    `--unfound-in read`, nor by the model's answerable share under `below`)."""
    out = []
    for name in dict.fromkeys(r["set"] for r in rows):
        mine = [r for r in rows if r["set"] == name]
        documents = natural_questions(NATURAL[name], 1 + max(r["document"] for r in mine))
        for index, (document, questions, _) in enumerate(documents):
            asked = {q.question: q for q in questions if q.answer}
            ids = None
            for row in (r for r in mine if r["document"] == index and r["question"] in asked):
                ids = ids if ids is not None else document_ids(document, tokenizer)
                windows = [tokenizer.decode(ids[a:b], skip_special_tokens=True) for a, b in row["windows"]]
                has = held(windows, asked[row["question"]])
                out.append({**row, "held": has, "loss": lost_to(row, has, below)})
    return out


def report(rows: list[dict]) -> None:
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print("| kind | stated | windows hold the answer | right as said (held / not held) | shipped right | "
          "lost to locating / reading / refusal |")
    print("|---|---:|---:|---|---:|---|")
    for kind in [*kinds, "all"]:
        mine = [r for r in rows if kind in ("all", r["kind"])]
        said = Counter((r["held"], r["verdict"] == "right") for r in mine)
        losses = Counter(r["loss"] for r in mine)
        print(f"| {kind} | {len(mine)} | {sum(r['held'] for r in mine)} | {said[True, True]} / {said[False, True]} | "
              f"{losses[None]} | {' / '.join(str(losses[loss]) for loss in LOSSES)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True, help="a replay's rows (JSONL, each with its windows)")
    parser.add_argument("--model", required=True, help="the model folder the replay ran (its tokenizer)")
    parser.add_argument("--at", type=float, default=0.725,
                        help="the answerable share below which the shipped route refuses (the 1.5B's; 0: none)")
    parser.add_argument("--list", choices=LOSSES, help="also print the questions lost there")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.rows.open() if line.strip()]
    if missing := [r["question"] for r in rows if "windows" not in r]:
        parser.error(f"{len(missing)} rows hold no windows (rows from before the replays recorded them)")
    checked = audited(rows, load_tokenizer(args.model), args.at)
    report(checked)
    for row in (r for r in checked if args.list and r["loss"] == args.list):
        withheld = "words unfound" if row["wrefused"] else f"answerable {row['answerable']:.3f}"
        print(f"- {row['kind']}: {row['question']} -> {row['answer']!r} ({row['verdict']}; {withheld})")


if __name__ == "__main__":
    main()
