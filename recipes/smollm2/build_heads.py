"""The recipe for the retaining heads shipped for SmolLM2-135M-Instruct, as one command:

    pip install --no-deps --target runs/prose-packages scipy==1.16.3 pandas==2.3.3 astropy==7.1.1 \\
        sqlalchemy==2.0.44 scikit-learn==1.7.2 statsmodels==0.14.5 django==5.2.8
    python -m recipes.smollm2.build_heads --prose-packages runs/prose-packages --out runs/smollm2

It writes the training records (prose of the training packages only, `prose.py`), trains heads on the model named
`smollm2` with `locret train`'s trainer (checkpoints every 250 steps; run it again to resume), then copies the heads,
with the model's identity and the engine defaults below, into the package (`locret_cli/models/heads/`).
Costs measured on 2 CPU cores are in docs/real-models.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from locret_cli.models.heads_files import HEADS_CONFIG, HEADS_WEIGHTS
from locret_cli.models.loading import load_model
from locret_cli.models.shipped import DEFAULTS_FILE, HEADS_ROOT
from locret_cli.training import TrainConfig, train_heads
from recipes import prose
from recipes.smollm2 import heads_data

NAME = "smollm2-135m-instruct"
# engine settings recorded with the heads (docs/real-models.md, docs/reader.md): the model's 8,192 positions hold
# budget + chunk + question under compact positions; answers come from the window the question's words locate, read
# again whole, and from the bounded cache (with the reader) where none is located or the window's answer names
# nothing the document holds
DEFAULTS = {"budget": 4096, "chunk_size": 1024, "stabilizers": 256, "score_pool": 1, "reread": 1, "reread_tokens": 1024,
            "locate": "words", "stop_repeats": 8, "fallback": "unspecific"}
RECIPE = {"examples": 1500, "tokens": 1700, "steps": 1500, "hidden": 256, "lr": 5e-4, "max_len": 2048}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prose-packages", type=Path, help="the `pip install --target` folder of the extra packages")
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2"))
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-weight", type=float, default=0.0, help="the keep loss's weight (0: the shipped heads)")
    parser.add_argument("--no-install", action="store_true", help="train only; leave the package's heads alone")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "train.jsonl"
    if not data.exists():
        paragraphs = prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages)
        heads_data.write(paragraphs, data, RECIPE["examples"], RECIPE["tokens"], args.seed)
        print(f"wrote {RECIPE['examples']} records from {len(paragraphs)} paragraphs to {data}", flush=True)
    loaded = load_model("smollm2", device="cpu", dtype="bf16")
    config = TrainConfig(steps=args.steps, hidden=RECIPE["hidden"], lr=RECIPE["lr"], seed=args.seed, save_every=250,
                         keep_weight=args.keep_weight)
    heads_dir = args.out / "heads"
    resume = (heads_dir / "checkpoints").exists()
    started = time.time()
    summary = train_heads(loaded, data, heads_dir, config, max_len=RECIPE["max_len"], resume=resume, overwrite=True,
                          warn=print, on_step=lambda r: r.step % 50 == 0 and print(
                              f"step {r.step}/{r.steps} loss {r.loss:.4f} acc {r.accuracy:.3f} "
                              f"{r.tokens_per_s:,.0f} tok/s", flush=True))
    print(f"trained {summary.steps} steps in {time.time() - started:.0f} s; held-out top-10% overlap "
          f"{summary.heldout_accuracy:.3f}; peak RSS {summary.peak_bytes / 2**20:.0f} MiB", flush=True)
    if not args.no_install:
        target = HEADS_ROOT / NAME
        target.mkdir(parents=True, exist_ok=True)
        # bf16 on disk keeps the package data under 20 MB; heads load in the model's compute dtype anyway
        weights = {k: v.to(torch.bfloat16) for k, v in load_file(str(heads_dir / HEADS_WEIGHTS)).items()}
        save_file(weights, str(target / HEADS_WEIGHTS))
        shutil.copy(heads_dir / HEADS_CONFIG, target / HEADS_CONFIG)
        (target / DEFAULTS_FILE).write_text(json.dumps(DEFAULTS, indent=2) + "\n")
        print(f"installed the heads in {target}")


if __name__ == "__main__":
    main()
