"""Whether an answer's samples agree with it, as a refusal signal: an answer the windows state should come back when
the model samples again from them; one it makes up should vary (an African country, a default timeout).

    python -m research.sample_agreement_replay --model runs/qwen1.5b/qwen2.5-coder-1.5b-instruct \\
        --sets natural-validation --documents 6 --out runs/refusal/q15-val-samples.jsonl
    python -m research.sample_agreement_replay --out runs/refusal/q15-val-samples.jsonl --report

Each question's windows (the shipped `--config`) are read once with a full cache, as `answer_check_replay` reads
them; its row holds what that replay's holds (the greedy answer, its verdicts, the shares of yes) and `samples`:
`--samples` answers sampled on forks of the same engine at `--temperature` (seeds 1, 2, ...). An answer's
`agreement` is the mean, over its samples, of the share of its own new words (those of neither the question nor
`grounding.COMMON`) that the sample also says; an answer with no new words agrees fully. `--report` prints right /
made up / bound wrong / not-stated refused by kind where an answer is refused as said, as shipped (`--unfound-in
read`, and the model's answerable share under `--at`), and, for each agreement threshold of `--below`, where the
agreement falls below it: alone, or the windows lack the answer's words, both (a pardon), or the shipped rule.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from benchmarks.reader_routes import CONFIGS
from locret_cli.api import load_session
from locret_cli.checks.grounding import COMMON, words
from locret_cli.core.answer.reread import locate, read_windows
from locret_cli.inputs.prompt import conversation_ids
from research.answer_check_replay import checked_answer, pending_questions, replay_parser, table_row


def new_words(question: str, text: str) -> set[str]:
    """`text`'s words that are neither the question's nor common ones."""
    return set(words(text)) - set(words(question)) - COMMON


def agreement(question: str, answer: str, samples: list[str]) -> float:
    """The mean share of `answer`'s new words that each sample also says (1.0 where it has none, or no samples)."""
    said = new_words(question, answer)
    if not said or not samples:
        return 1.0
    return sum(len(said & new_words(question, s)) / len(said) for s in samples) / len(samples)


def replay(args) -> None:
    session = load_session(args.model, device="cpu", dtype=args.dtype)
    answering = replace(session.plan(answer={"max_new_tokens": 32}).answer, **CONFIGS[args.config][0])
    for name, index, reading, numbers, question in pending_questions(args, session, answering):
        asked, tokenizer = question.question, reading.tokenizer
        spans, _, _ = locate(reading.engine, tokenizer, reading.input_ids, reading.engine.pinned, asked, [],
                             answering)
        engine, _ = read_windows(reading.engine, tokenizer, reading.input_ids, spans, answering)
        row, _ = checked_answer(engine, reading, spans, question, numbers)
        samples = []
        for seed in range(1, args.samples + 1):
            sampled = engine.fork(replace(answering, temperature=args.temperature, seed=seed))
            generation = sampled.answer(conversation_ids(tokenizer, [], asked), numbers=numbers)
            samples.append(tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip())
        text = reading.document_text()
        row = {"set": name, "document": index, "kind": question.kind, "question": asked, "windows": spans, **row,
               "samples": samples, "sample_verdicts": [question.verdict(s, text) for s in samples]}
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")


def report(path: Path, below: tuple[float, ...], at: float) -> None:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    for row in rows:
        row["agreement"] = agreement(row["question"], row["answer"], row["samples"])
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    print(f"{len(rows)} questions")
    print(f"| refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    checked = lambda r: r["answerable"] < at  # noqa: E731
    rules = [("as said", lambda r: False), ("the windows lack its words", lambda r: r["wrefused"]),
             (f"that, or answerable < {at:g} (shipped)", lambda r: r["wrefused"] or checked(r))]
    for t in below:
        low = lambda r, t=t: r["agreement"] < t  # noqa: E731
        rules += [(f"agreement < {t:g}", low),
                  (f"lacking words or agreement < {t:g}", lambda r, low=low: r["wrefused"] or low(r)),
                  (f"lacking words and agreement < {t:g}", lambda r, low=low: r["wrefused"] and low(r)),
                  (f"shipped, or agreement < {t:g}", lambda r, low=low: r["wrefused"] or checked(r) or low(r))]
    for label, refuses in rules:
        print(table_row(label, rows, refuses, kinds))


def main() -> None:
    parser = replay_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4, help="answers sampled beside the greedy one")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--below", default="0.25,0.5,0.75", help="agreement thresholds to report")
    parser.add_argument("--at", type=float, default=0.725, help="the answerable share the shipped route refuses under")
    args = parser.parse_args()
    if args.report:
        report(args.out, tuple(float(t) for t in args.below.split(",")), args.at)
    else:
        replay(args)


if __name__ == "__main__":
    main()
