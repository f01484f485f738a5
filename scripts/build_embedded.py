"""Build the embedded default model, from nothing, in one seeded command:

    python -m scripts.build_embedded --out runs/embedded [--threads 2]

Steps: train the tokenizer, pretrain the model on generated QA documents (curriculum), train its retaining heads
with `locret train`, evaluate, and copy the result into locret_cli/embedded/. Logs go to OUT/build.log.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from scripts.embedded.pretrain import PretrainConfig, pretrain
from scripts.embedded.tokenizer import train_tokenizer
from locret_cli.tokenizer import TIKTOKEN_FILE

VOCAB = 3072


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the embedded model.")
    parser.add_argument("--out", type=Path, default=Path("runs/embedded"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-minutes", type=float, default=90.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    log_file = (args.out / "build.log").open("a")

    def log(message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        print(line, file=sys.stderr, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    tokenizer = train_tokenizer(args.seed, VOCAB)
    tokenizer.save(args.out / TIKTOKEN_FILE)
    log(f"tokenizer: {len(tokenizer)} tokens")
    model = pretrain(tokenizer, args.out, PretrainConfig(seed=args.seed, max_minutes=args.max_minutes), log)
    model.to(torch.bfloat16).save_pretrained(args.out / "model")
    log(f"model saved to {args.out / 'model'}")


if __name__ == "__main__":
    main()
