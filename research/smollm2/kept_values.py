"""How much of each training answer's value a reader run's saved reads keep, by kind of question.

A value counts as kept by one (layer, KV head) of a read when every token of one of its occurrences in the document
is among that head's kept entries (`locret_cli.training.kept_values`); its share is the fraction of pairs that keep
it. The reader recipe trains only on questions whose share reaches `--min-kept-share`; this prints the shares, and
how many questions a threshold would skip, for a run's `train.jsonl` and `reads/`:

    python -m research.smollm2.kept_values runs/smollm2-reader-long --min-share 0.3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from locret_cli.api import load_session
from locret_cli.training.kept_values import kept_map, value_share
from recipes.smollm2.heads_data import replied_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a reader run: train.jsonl and reads/")
    parser.add_argument("--min-share", type=float, default=0.3)
    args = parser.parse_args()
    tokenizer = load_session("smollm2", device="cpu", reader="off").loaded.tokenizer
    shares: dict[str, list[float]] = {"short documents": [], "long documents": [], "pass keys": []}
    for index, line in enumerate((args.run / "train.jsonl").open()):
        record = json.loads(line)
        ids, kept = kept_map(args.run / "reads" / f"{index:06d}.locret")
        for question in record["questions"]:
            share = value_share(tokenizer, ids, kept, question.get("value") or replied_value(question["answer"]))
            kind = "pass keys" if "pass key" in question["question"] else \
                "long documents" if record.get("budget") else "short documents"
            shares[kind].append(share)
    for kind, values in shares.items():
        values.sort()
        deciles = [round(values[int(len(values) * p)], 2) for p in (0.1, 0.25, 0.5, 0.75, 0.9)] if values else []
        below = sum(v < args.min_share for v in values)
        print(f"{kind}: {len(values)} questions, shares at 10/25/50/75/90%: {deciles}, {below} below {args.min_share}")


if __name__ == "__main__":
    main()
