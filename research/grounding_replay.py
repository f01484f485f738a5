"""Recorded answers grounded again by two versions of `checks/grounding.py`: how many right answers each withholds
(under --strict) and how many wrong ones it lets through.

The rows are `benchmarks/reader_routes.py`'s (sets dev, kinds and natural); each document is built again as
that script builds it, and each answer is judged right or not by its recorded verdict (`bench/scoring.py`). The
other version is a grounding.py file from another commit (`git show REV:locret_cli/checks/grounding.py > old.py`).

    python -m research.grounding_replay --model runs/qwen0.5b/qwen2.5-coder-0.5b-instruct \\
        --before /tmp/grounding-before.py runs/qwen-eval/*.jsonl
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks.reader_routes import dev_questions, kinds_questions, natural_questions
from locret_cli.bench.scoring import NOT_STATED
from locret_cli.checks import grounding
from locret_cli.models.loading import load_tokenizer


def load_version(path: Path):
    spec = importlib.util.spec_from_file_location("grounding_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class Texts:
    """Each recorded document's text, built once, as reader_routes built it."""

    def __init__(self, tokenizer, packages: Path):
        self.tokenizer, self.packages, self.built = tokenizer, packages, {}

    def text(self, name: str, length: int, index: int) -> str:
        key = (name, length)
        if key not in self.built:
            session = type("S", (), {"loaded": type("L", (), {"tokenizer": self.tokenizer})})
            docs = (natural_questions("test" if name == "natural" else "validation", 99) if name.startswith("natural")
                    else dev_questions(length, 4, self.packages) if name == "dev" else kinds_questions(session, length, 4))
            self.built[key] = ["".join(s.text for s in d.segments()) for d, _, _ in docs]
        return self.built[key][index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", type=Path, nargs="+")
    parser.add_argument("--model", required=True, help="the model whose tokenizer built the kinds documents")
    parser.add_argument("--before", type=Path, required=True, help="the other grounding.py")
    parser.add_argument("--prose-packages", type=Path, default=Path("runs/prose-packages"))
    args = parser.parse_args()
    versions = {"before": load_version(args.before), "after": grounding}
    texts = Texts(load_tokenizer(args.model), args.prose_packages)
    counts = defaultdict(lambda: defaultdict(int))
    for path in args.rows:
        for row in map(json.loads, path.read_text().splitlines()):
            if "verdict" not in row:
                continue
            text = texts.text(row["set"], row["length"], row["document"])
            right = row["verdict"] == "right"
            cell = counts[(row["set"], row["policy"], row["config"])]
            cell["right" if right else "wrong"] += 1
            for name, module in versions.items():
                grounded = module.ground(row["question"], row["answer"], module.DocumentText([text], ["p. 1"]))
                silent = grounded.status == "n/a" and (name == "before" or NOT_STATED.search(row["answer"]))
                trusted = grounded.status == "found" or bool(silent)
                cell[f"{name} withheld" if right else f"{name} let through"] += (not trusted) if right else trusted
    print("| set | policy | configuration | right | wrong | withheld before | withheld after | let through before | "
          "let through after |\n|---|---|---|---:|---:|---:|---:|---:|---:|")
    for (name, policy, config), cell in sorted(counts.items()):
        print(f"| {name} | {policy} | {config} | {cell['right']} | {cell['wrong']} | {cell['before withheld']} | "
              f"{cell['after withheld']} | {cell['before let through']} | {cell['after let through']} |")


if __name__ == "__main__":
    main()
