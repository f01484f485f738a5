"""Can retaining heads learn what natural-question answers attend to? A small fit before any long run.

Heads are trained on `--train` records of `recipes/natural_records.py` (questions as people ask them over the
transformers reference) and scored on held-out records by the trainer's own measure: the share of each KV head's
top 10% of labelled entries (the answer's attention, `training/labels.py`) that the heads also rank in their top
10%. The shipped heads are scored on the same held-out records, so the two numbers compare; `--from-shipped` trains
the shipped heads further instead of new ones.

    python -m recipes.natural_records --out runs/natural-fit.jsonl --examples 100 --tokens 2048
    python -m research.natural_heads_fit --model runs/qwen0.5b/qwen2.5-coder-0.5b-instruct \\
        --data runs/natural-fit.jsonl --steps 200 --out runs/natural-fit
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import load_model
from locret_cli.models.shipped import find_shipped
from locret_cli.training import TrainConfig
from locret_cli.training.data import load_records, tokenize
from locret_cli.training.trainer import HeadTrainer
from recipes.heads_recipe import RECIPE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--heldout", type=float, default=0.2, help="the share of records held out")
    parser.add_argument("--keep-weight", type=float, default=1.0)
    parser.add_argument("--from-shipped", action="store_true", help="go on training the shipped heads, not new ones")
    args = parser.parse_args()
    loaded = load_model(args.model, device="cpu", dtype="bf16")
    examples = tokenize(load_records(args.data, print), loaded.tokenizer, loaded.model, 10240)
    config = TrainConfig(steps=args.steps, hidden=RECIPE["hidden"], lr=RECIPE["lr"], save_every=10**9,
                         keep_weight=args.keep_weight, eval_fraction=args.heldout)
    shipped = find_shipped(loaded.model)
    if shipped is None:
        raise SystemExit(f"no heads are shipped for {args.model}: nothing to compare with")
    start = load_heads(shipped.directory, loaded.model, dtype=torch.float32) if args.from_shipped else None
    trainer = HeadTrainer(loaded.model, examples, args.out, config, start)
    before = sum(trainer.evaluate()) / len(trainer.heads.layers)
    started = time.time()
    summary = trainer.train(on_step=lambda r: r.step % 25 == 0 and print(
        f"step {r.step}: loss {r.loss:.4f}, train overlap {r.accuracy:.3f}", flush=True))
    trained_s = time.time() - started
    trainer.heads = load_heads(shipped.directory, loaded.model, dtype=torch.float32)
    shipped_overlap = sum(trainer.evaluate()) / len(trainer.heads.layers)
    result = {"records": len(examples), "heldout": summary.heldout_examples, "steps": summary.steps,
              "train_s": round(trained_s), "before": round(before, 3),
              "trained": round(summary.heldout_accuracy, 3), "shipped": round(shipped_overlap, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
