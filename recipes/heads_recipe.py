"""Training a real model's retaining heads on the training packages' prose, and installing them in the package with
the model's identity and recorded engine settings: the one procedure behind `recipes/<model>/build_heads.py`.

Checkpoints are written every 250 steps; running the same command again resumes. A run trained with --no-install
(across sessions, say) is installed later with --install-only.
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

RECIPE = {"examples": 1500, "tokens": 1700, "steps": 1500, "hidden": 256, "lr": 5e-4, "max_len": 2048}


def arguments(description: str, out: str, steps: int = RECIPE["steps"], keep_weight: float = 0.0) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prose-packages", type=Path, help="the `pip install --target` folder of the extra packages")
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-weight", type=float, default=keep_weight,
                        help=f"the keep loss's weight (0: no keep loss; default {keep_weight})")
    parser.add_argument("--no-install", action="store_true", help="train only; leave the package's heads alone")
    parser.add_argument("--install-only", action="store_true",
                        help="install the heads a finished run left in OUT/heads, without loading the model")
    return parser.parse_args()


def build(model: str, name: str, defaults: dict, args: argparse.Namespace) -> None:
    """Write the records (once), train heads for `model` in OUT/heads, and unless --no-install copy them into the
    package's heads/`name` with `defaults` as their recorded settings; with --install-only, only copy them."""
    heads_dir = args.out / "heads"
    if args.install_only:
        if not (heads_dir / HEADS_WEIGHTS).is_file():
            raise SystemExit(f"{heads_dir} holds no finished heads; train them first")
        install(heads_dir, name, defaults)
        return
    torch.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "train.jsonl"
    if not data.exists():
        paragraphs = prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages)
        heads_data.write(paragraphs, data, RECIPE["examples"], RECIPE["tokens"], args.seed)
        print(f"wrote {RECIPE['examples']} records from {len(paragraphs)} paragraphs to {data}", flush=True)
    loaded = load_model(model, device="cpu", dtype="bf16")
    config = TrainConfig(steps=args.steps, hidden=RECIPE["hidden"], lr=RECIPE["lr"], seed=args.seed, save_every=250,
                         keep_weight=args.keep_weight)
    resume = (heads_dir / "checkpoints").exists()
    started = time.time()
    summary = train_heads(loaded, data, heads_dir, config, max_len=RECIPE["max_len"], resume=resume, overwrite=True,
                          warn=print, on_step=lambda r: r.step % 50 == 0 and print(
                              f"step {r.step}/{r.steps} loss {r.loss:.4f} acc {r.accuracy:.3f} "
                              f"{r.tokens_per_s:,.0f} tok/s", flush=True))
    print(f"trained {summary.steps} steps in {time.time() - started:.0f} s; held-out top-10% overlap "
          f"{summary.heldout_accuracy:.3f}; peak RSS {summary.peak_bytes / 2**20:.0f} MiB", flush=True)
    if not args.no_install:
        install(heads_dir, name, defaults)


def install(heads_dir: Path, name: str, defaults: dict) -> None:
    """Copy the heads in `heads_dir` into the package's heads/`name`, in bf16, with `defaults` recorded beside."""
    target = HEADS_ROOT / name
    target.mkdir(parents=True, exist_ok=True)
    # bf16 on disk keeps the package data small; heads load in the model's compute dtype anyway
    weights = {k: v.to(torch.bfloat16) for k, v in load_file(str(heads_dir / HEADS_WEIGHTS)).items()}
    save_file(weights, str(target / HEADS_WEIGHTS))
    shutil.copy(heads_dir / HEADS_CONFIG, target / HEADS_CONFIG)
    (target / DEFAULTS_FILE).write_text(json.dumps(defaults, indent=2) + "\n")
    print(f"installed the heads in {target}")
