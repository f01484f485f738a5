"""What `--stop-repeats N` would have done to recorded SmolLM2 answers, without decoding them again.

Greedy decoding makes the answer with the stop rule a prefix of the answer without it: the engine stops where the
tokens so far end with a run of N or more tokens twice in a row, and drops the repeat. So the rule can be replayed on
the recorded answers' tokens (the answer text tokenized again, which may split a few tokens differently from how they
were decoded). For each N: how many answers it cuts, and whether any right answer turns wrong.

    python -m research.smollm2.stop_repeats runs/spans/*.jsonl runs/base/*.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer

from locret_cli.bench.scoring import contains_match
from locret_cli.core.engine import repeated_run
from locret_cli.models.named import KNOWN, packaged_file


def stopped(tokens: list[int], shortest: int) -> list[int]:
    """`tokens` as the engine's decode loop would have ended them under stop_repeats=`shortest`."""
    kept = []
    for token in tokens:
        kept.append(token)
        if period := repeated_run(kept, shortest):
            return kept[:-period]
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="+", type=Path, help="JSONL rows from benchmarks/smollm2/evaluate.py")
    parser.add_argument("--shortest", default="4,6,8,12,16")
    args = parser.parse_args()
    path = packaged_file(KNOWN["smollm2"])
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    rows = [json.loads(line) for p in args.rows for line in p.read_text().splitlines() if line.strip()]
    print(f"{len(rows)} answers, {sum(r['correct'] for r in rows)} right")
    print("| stop_repeats | answers cut | right before | right after | right turned wrong | wrong turned right |")
    print("|---:|---:|---:|---:|---:|---:|")
    for shortest in map(int, args.shortest.split(",")):
        cut = before = after = lost = gained = 0
        for row in rows:
            tokens = tokenizer.encode(row["answer"], add_special_tokens=False)
            kept = stopped(tokens, shortest)
            answer = tokenizer.decode(kept, skip_special_tokens=True).strip()
            right = contains_match(answer, row["expected"])
            cut += len(kept) < len(tokens)
            before, after = before + row["correct"], after + right
            lost += row["correct"] and not right
            gained += right and not row["correct"]
        print(f"| {shortest} | {cut} | {before} | {after} | {lost} | {gained} |")


if __name__ == "__main__":
    main()
