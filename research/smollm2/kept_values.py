"""How much of each training answer's value a reader run's saved reads keep, and the run's data restricted to the
answers a read keeps.

A value (the last words of an answer, after " is ": `heads_data.replied_value`) counts as kept by one (layer, KV head) of a read when every
token of one of its occurrences in the document is among that head's kept entries (the read's `document.ids` and
`layers.N.origins`). Its share is the fraction of (layer, KV head) pairs that keep it.

    python -m research.smollm2.kept_values runs/smollm2-reader-long                       # the shares, by kind
    python -m research.smollm2.kept_values runs/smollm2-reader-long --min-share 0.3 --out runs/smollm2-reader-kept

With `--out`, OUT/train.jsonl holds each record with only the questions whose value's share is at least
`--min-share` (records left with none are dropped), and OUT/reads/ hard links to the matching reads, renumbered, so
`recipes.smollm2.build_reader --out OUT --no-install` trains on them without reading again.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open

from locret_cli.api import load_session
from recipes.smollm2.heads_data import replied_value


def kept_share(ids: torch.Tensor, kept: torch.Tensor, value_ids: list[int]) -> float:
    """The largest share, over the occurrences of `value_ids` in `ids`, of the rows of `kept` (one boolean row per
    (layer, KV head), one column per document token) that hold every token of the occurrence; 0.0 if it never
    occurs."""
    width = len(value_ids)
    if not width or width > len(ids):
        return 0.0
    starts = (ids.unfold(0, width, 1) == torch.tensor(value_ids)).all(1).nonzero().flatten().tolist()
    return max((kept[:, start:start + width].all(1).float().mean().item() for start in starts), default=0.0)


def read_kept(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A saved read's document ids, and which of them each (layer, KV head) keeps."""
    with safe_open(str(path), "pt") as saved:
        ids = saved.get_tensor("document.ids")
        names = sorted((n for n in saved.keys() if n.endswith(".origins")), key=lambda n: int(n.split(".")[1]))
        origins = torch.cat([saved.get_tensor(name).flatten(0, -2) for name in names]).long()
    kept = torch.zeros(origins.shape[0], len(ids), dtype=torch.bool)
    inside = (origins >= 0) & (origins < len(ids))
    rows = torch.arange(origins.shape[0]).unsqueeze(1).expand_as(origins)
    kept[rows[inside], origins[inside]] = True
    return ids, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a reader run: train.jsonl and reads/")
    parser.add_argument("--min-share", type=float, default=0.3)
    parser.add_argument("--out", type=Path, help="write the restricted data and linked reads here")
    args = parser.parse_args()
    tokenizer = load_session("smollm2", device="cpu", reader="off").loaded.tokenizer
    records = [json.loads(line) for line in (args.run / "train.jsonl").open()]
    shares: dict[str, list[float]] = {"short documents": [], "long documents": [], "pass keys": []}
    kept_records = []
    for index, record in enumerate(records):
        ids, kept = read_kept(args.run / "reads" / f"{index:06d}.locret")
        questions = []
        for question in record["questions"]:
            value = replied_value(question["answer"])
            share = max(kept_share(ids, kept, tokenizer(text, add_special_tokens=False)["input_ids"])
                        for text in (" " + value, value))
            kind = "pass keys" if "pass key" in question["question"] else \
                "long documents" if record.get("budget") else "short documents"
            shares[kind].append(share)
            if share >= args.min_share:
                questions.append(question)
        if questions:
            kept_records.append((index, {**record, "questions": questions}))
    for kind, values in shares.items():
        values.sort()
        deciles = [round(values[int(len(values) * p)], 2) for p in (0.1, 0.25, 0.5, 0.75, 0.9)] if values else []
        below = sum(v < args.min_share for v in values)
        print(f"{kind}: {len(values)} questions, shares at 10/25/50/75/90%: {deciles}, {below} below {args.min_share}")
    if args.out:
        (args.out / "reads").mkdir(parents=True, exist_ok=True)
        with (args.out / "train.jsonl").open("w") as out:
            for number, (index, record) in enumerate(kept_records):
                link = args.out / "reads" / f"{number:06d}.locret"
                if not link.exists():
                    os.link(args.run / "reads" / f"{index:06d}.locret", link)
                out.write(json.dumps(record) + "\n")
        print(f"wrote {len(kept_records)} records, {sum(len(r['questions']) for _, r in kept_records)} questions")


if __name__ == "__main__":
    main()
