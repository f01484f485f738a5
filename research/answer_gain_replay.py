"""How much more likely the located windows make the model's own answer than the question alone does: the answer's
gain, log P(answer | windows, question) - log P(answer | question), token by token, as a refusal signal beside
`--unfound-in read` and `--answerable-below`. An answer the windows state should gain where a made-up one (the
model's prior, worded for the question) should not, whatever words the answer uses.

    python -m research.answer_gain_replay --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct \\
        --sets natural-validation --documents 6 --out runs/q15-val-gain.jsonl
    python -m research.answer_gain_replay --out runs/q15-val-gain.jsonl --report [--at sum:2.5]

Each question's windows (`--config`, shipped: three BM25 windows of 1,024) are read whole once, as the route reads
them; a fork answers and is checked as `answer_check_replay.windows_answer` does, then the answer's tokens are scored
by teacher forcing on a fork of that engine ("with") and on an engine that read the prompt's head and no text
("without": the question alone, in the same layout). A row per question goes to `--out` (a rerun skips the questions
there). `--report` prints, for each statistic of the per-token gain (its sum, its largest token, its mean), three
rules at thresholds from the rows' own percentiles and `--at`: refuse below it alone; the shipped refusal
(`--unfound-in read`, answerable < 0.725) pardoned at or above it; the shipped refusal or below it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from benchmarks.reader_routes import CONFIGS
from locret_cli.api import load_session
from locret_cli.core.answer.reread import locate, read_windows
from locret_cli.inputs.prompt import conversation_ids
from research.answer_check_replay import checked_answer, pending_questions, replay_parser, table_row

ANSWERABLE_AT = 0.725  # the 1.5B's recorded `answerable_below`
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
STATISTICS = {"sum": sum, "max": max, "mean": lambda gains: sum(gains) / len(gains)}


@torch.no_grad()
def answer_logprobs(engine, prompt_ids: list[int], answer_ids: list[int]) -> list[float]:
    """log P of each of `answer_ids` after `prompt_ids`, on a fork of `engine` (teacher forcing: one forward)."""
    if not answer_ids:
        return []
    logits = engine.fork().logits(prompt_ids + answer_ids, False, len(answer_ids) + 1)[:-1]
    chosen = torch.log_softmax(logits, -1).gather(1, torch.tensor(answer_ids).unsqueeze(1))
    return [round(float(v), 4) for v in chosen.squeeze(1)]


def replay(args) -> None:
    session = load_session(args.model, device="cpu", dtype=args.dtype)
    answering = replace(session.plan(answer={"max_new_tokens": 32}).answer, **CONFIGS[args.config][0])
    last = bare = None  # the reading of the last question, and an engine that read its prompt's head and no text
    for name, index, reading, numbers, question in pending_questions(args, session, answering):
        tokenizer, ids, asked = reading.tokenizer, reading.input_ids, question.question
        if reading is not last:
            last, bare = reading, read_windows(reading.engine, tokenizer, ids, [], answering)[0]
        spans, _, _ = locate(reading.engine, tokenizer, ids, reading.engine.pinned, asked, [], answering)
        engine, _ = read_windows(reading.engine, tokenizer, ids, spans, answering)
        row, answer_ids = checked_answer(engine, reading, spans, question, numbers)
        prompt = conversation_ids(tokenizer, [], asked)
        row.update({"set": name, "document": index, "kind": question.kind, "question": asked, "windows": spans,
                    "tokens": [tokenizer.decode([t]) for t in answer_ids],
                    "with": answer_logprobs(engine, prompt, answer_ids),
                    "without": answer_logprobs(bare, prompt, answer_ids)})
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")


def gain(row: dict, statistic: str) -> float:
    """`statistic` of the answer's per-token gain (0 for an empty answer)."""
    gains = [a - b for a, b in zip(row["with"], row["without"])]
    return STATISTICS[statistic](gains) if gains else 0.0


def shipped(row: dict) -> bool:
    return row["wrefused"] or row["answerable"] < ANSWERABLE_AT


def rules(statistic: str, t: float) -> list[tuple[str, object]]:
    """The three rules on `statistic` at threshold `t`: (label, refuses)."""
    return [(f"{statistic} < {t:g}", lambda r: gain(r, statistic) < t),
            (f"shipped unless {statistic} >= {t:g}", lambda r: shipped(r) and gain(r, statistic) < t),
            (f"shipped, or {statistic} < {t:g}", lambda r: shipped(r) or gain(r, statistic) < t)]


def report(path: Path, fixed: dict[str, tuple[float, ...]]) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"{len(rows)} questions")
    print(f"| refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    print(table_row("never (as said)", rows, lambda r: False, kinds))
    print(table_row(f"shipped (`--unfound-in read`, answerable < {ANSWERABLE_AT})", rows, shipped, kinds))
    for statistic in STATISTICS:
        values = sorted(gain(r, statistic) for r in rows)
        at = {round(values[int(share * len(values))], 3) for share in SHARES} | set(fixed.get(statistic, ()))
        for t in sorted(at):
            for label, refuses in rules(statistic, t):
                print(table_row(label, rows, refuses, kinds))


def main() -> None:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument("--at", default="", help="comma-separated STATISTIC:THRESHOLD pairs to report beside the "
                                                "rows' own percentiles (a threshold chosen on another half)")
    args = parser.parse_args()
    fixed: dict[str, tuple[float, ...]] = {}
    for item in filter(None, args.at.split(",")):
        statistic, value = item.split(":")
        fixed[statistic] = fixed.get(statistic, ()) + (float(value),)
    report(args.out, fixed) if args.report else replay(args)


if __name__ == "__main__":
    main()
