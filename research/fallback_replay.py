"""The shipped windows' answers, and where they are refused the bounded cache's answer instead: replayed from stored
rows, with no model run.

    python -m research.fallback_replay --windows runs/pairs/q15-val.jsonl --cache runs/amx/q15-b16384.jsonl \\
        --set natural-validation

`--windows` holds one row per question of the shipped route (`answer_check_replay` or `locate_pairs` rows, rule
bm25: the three BM25 windows' answer, `wrefused` where `--unfound-in read` withholds it, `answerable` the model's
share of yes that the windows answer); `--cache` holds `benchmarks/reader_routes.py` rows of config `one-read` for
the same questions (the bounded cache's answer on one read, and `refuse_verdict`: as `--refuse-unfound` shows it, the
answer looked for in the whole document, as the product looks for a bounded cache's answer). Printed by kind: the
shipped route (refused where `wrefused` or `answerable` < --at); the bounded cache answering, as `--refuse-unfound`
shows it, where the shipped route refuses for any reason, for the check only, or for `--unfound-in read` only; the
bounded cache alone; and, as a ceiling, a question counted right where either answers it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from research.answer_check_replay import table_row


def joined_rows(windows: Path, cache: Path, split: str) -> list[dict]:
    """One row per question of `split` in both files: the windows' row, with `cache` (the bounded cache's verdict as
    `--refuse-unfound` shows it) added."""
    cached = {r["question"]: r for r in map(json.loads, cache.open())
              if r["set"] == split and r["config"] == "one-read"}
    rows = [r for r in map(json.loads, windows.open()) if r["set"] == split and r.get("rule", "bm25") == "bm25"]
    missing = [r["question"] for r in rows if r["question"] not in cached]
    if missing:
        raise SystemExit(f"{len(missing)} questions have no bounded-cache row, the first: {missing[0]!r}")
    return [{**r, "cache": cached[r["question"]]["refuse_verdict"]} for r in rows]


def falls_back(row: dict, refuses) -> dict:
    """`row`, or where `refuses` says the shipped route refuses it, the bounded cache's answer in its place (`fell`:
    its verdict is that of the answer shown, a refusal included)."""
    return {**row, "verdict": row["cache"], "fell": True} if refuses(row) else row


def report(rows: list[dict], at: float) -> None:
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    checked = (lambda r: r["answerable"] < at)
    unfound = (lambda r: r["wrefused"])
    shipped = (lambda r: unfound(r) or checked(r))
    print(f"{len(rows)} questions; the shipped route refuses {sum(map(shipped, rows))}")
    print(f"| answer, refused where | right | made up | bound wrong | not-stated refused | {' / '.join(kinds)} |")
    print("|---|---:|---:|---:|---:|---|")
    print(table_row(f"shipped (`--unfound-in read`, answerable < {at:g})", rows, shipped, kinds))
    for label, when in (("any refusal", shipped), ("the check's refusal", lambda r: checked(r) and not unfound(r)),
                        ("`--unfound-in read`'s refusal", unfound)):
        fell = [falls_back(r, when) for r in rows]
        print(table_row(f"the bounded cache after {label}", fell, lambda r: shipped(r) and not r.get("fell"), kinds))
    alone = [{**r, "verdict": r["cache"]} for r in rows]
    print(table_row("the bounded cache alone (`--refuse-unfound`)", alone, lambda r: False, kinds))
    said = [r["not_stated_verdict"] if shipped(r) else r["verdict"] for r in rows]
    either = [{**r, "verdict": "right" if "right" in (v, r["cache"]) else v} for r, v in zip(rows, said)]
    print(table_row("ceiling: right by either", either, lambda r: False, kinds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--set", default="natural-validation")
    parser.add_argument("--at", type=float, default=0.725, help="the shipped answerable threshold")
    args = parser.parse_args()
    report(joined_rows(args.windows, args.cache, args.set), args.at)


if __name__ == "__main__":
    main()
