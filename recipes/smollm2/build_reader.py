"""The recipe for the reader shipped for SmolLM2-135M-Instruct, as one command:

    pip install --no-deps --target runs/prose-packages scipy==1.16.3 pandas==2.3.3 astropy==7.1.1 \\
        sqlalchemy==2.0.44 scikit-learn==1.7.2 statsmodels==0.14.5 django==5.2.8
    python -m recipes.smollm2.build_reader --prose-packages runs/prose-packages --out runs/smollm2-reader \
        --heads research/artifacts/smollm2-heads-without-keep-loss

It writes the training records (documents of the training packages' prose with facts, `reader_data.py`), trains a
reader with `locret train-reader`'s trainer on SmolLM2's own bounded caches, read with the heads given (default: the
shipped ones) and the shipped settings (reads are saved, checkpoints every 100 steps: run it again to resume), then
copies the reader into the package beside the heads (`locret_cli/models/heads/`), where `--model smollm2` finds it.
The shipped reader was trained on the reads of the heads trained without the keep loss, as the command above does.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from locret_cli.api import Session, load_session
from locret_cli.models.heads_files import load_heads
from locret_cli.models.reader_files import READER_CONFIG, load_reader, save_reader
from locret_cli.models.shipped import HEADS_ROOT
from locret_cli.training import ReaderConfig, train_reader
from recipes import prose
from recipes.smollm2 import reader_data
from recipes.smollm2.build_heads import NAME

# documents of 4K-16K tokens with 4-10 facts each, read at SmolLM2's recorded settings (blocks of 8 tokens included);
# 80 crowded ones, whose facts share one code and one role; 20 of 32K-96K tokens read at the recorded budget; and
# only the questions whose value 30% or more of a read's (layer, KV head) pairs keep (research/notes, 2026-11-27)
RECIPE = {"documents": 120, "lengths": (4000, 16000), "facts": (4, 10), "crowded": 80, "crowded_facts": (8, 12),
          "long": 20, "long_lengths": (32000, 96000), "long_facts": (8, 12), "steps": 2500, "rank": 8, "lr": 1e-3,
          "min_kept_share": 0.3}


def pair(text: str) -> tuple[int, int]:
    low, _, high = text.partition(",")
    return int(low), int(high or low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prose-packages", type=Path, help="the `pip install --target` folder of the extra packages")
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2-reader"))
    parser.add_argument("--documents", type=int, default=RECIPE["documents"])
    parser.add_argument("--lengths", type=pair, default=RECIPE["lengths"], help="MIN,MAX tokens of a document")
    parser.add_argument("--facts", type=pair, default=RECIPE["facts"], help="MIN,MAX facts in a document")
    parser.add_argument("--crowded", type=int, default=RECIPE["crowded"],
                        help="documents more, whose facts share one code and one role")
    parser.add_argument("--crowded-facts", type=pair, default=RECIPE["crowded_facts"],
                        help="MIN,MAX facts in a crowded document")
    parser.add_argument("--long", type=int, default=RECIPE["long"],
                        help="documents more, of --long-lengths tokens, read at the recorded budget")
    parser.add_argument("--long-lengths", type=pair, default=RECIPE["long_lengths"], help="MIN,MAX tokens")
    parser.add_argument("--min-kept-share", type=float, default=RECIPE["min_kept_share"],
                        help="skip questions whose value fewer of a read's (layer, KV head) pairs keep")
    parser.add_argument("--steps", type=int, default=RECIPE["steps"])
    parser.add_argument("--rank", type=int, default=RECIPE["rank"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heads", type=Path, help="read the documents with these heads (default: the shipped ones)")
    parser.add_argument("--span", type=int, help="read the documents keeping entries in blocks of this many tokens "
                                                 "(default: the recorded setting)")
    parser.add_argument("--lazy-after", type=int, help="read the documents with lazy prefill after this many layers "
                                                       "(default: the recorded setting)")
    parser.add_argument("--no-install", action="store_true", help="train only; leave the package's reader alone")
    parser.add_argument("--install-only", action="store_true", help="install the reader already trained in --out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "train.jsonl"
    session = load_session("smollm2", device="cpu", dtype="bf16", reader="off")
    if args.heads:
        session = Session(session.loaded, load_heads(args.heads, session.loaded.model), None)
    chosen = {name: value for name, value in (("span", args.span), ("lazy_after", args.lazy_after))
              if value is not None}
    if chosen:
        session = replace(session, loaded=replace(session.loaded, defaults={**session.loaded.defaults, **chosen}))
    batches = [reader_data.Batch(args.documents, args.lengths, args.facts),
               reader_data.Batch(args.crowded, args.lengths, args.crowded_facts, crowded=True),
               reader_data.Batch(args.long, args.long_lengths, RECIPE["long_facts"],
                                 budget=session.plan().read.budget)]
    if not data.exists():
        paragraphs = prose.paragraphs(prose.TRAIN_PACKAGES, args.prose_packages)
        reader_data.write(paragraphs, data, batches, args.seed)
        print(f"wrote {sum(b.count for b in batches)} documents from {len(paragraphs)} paragraphs to {data}",
              flush=True)
    config = ReaderConfig(steps=args.steps, rank=args.rank, lr=RECIPE["lr"], seed=args.seed,
                          min_kept_share=args.min_kept_share)
    if not args.install_only:
        train(session, data, args.out, config)
    if not args.no_install:
        read = session.plan().read
        data_meta = {"documents": args.documents, "lengths": args.lengths, "facts": args.facts,
                     "crowded": args.crowded, "crowded_facts": args.crowded_facts, "long": args.long,
                     "long_lengths": args.long_lengths, "long_facts": RECIPE["long_facts"],
                     "span": read.span, "lazy_after": read.lazy_after}
        install(args.out, session.loaded.model, config, data_meta)


def train(session, data: Path, out: Path, config: ReaderConfig) -> None:
    started = time.time()
    summary = train_reader(
        session, data, out, config, resume=(out / "checkpoint").exists(), overwrite=True, warn=print,
        on_read=lambda done, total: print(f"read {done}/{total} ({time.time() - started:.0f} s)", flush=True),
        on_step=lambda r: r.step % 50 == 0 and print(f"step {r.step}/{r.steps} loss {r.loss:.4f} {r.seconds:.0f} s",
                                                     flush=True))
    print(f"trained {summary.steps} steps in {summary.seconds:.0f} s after {summary.read_s:.0f} s of reads "
          f"({summary.skipped} questions skipped); loss {summary.final_loss:.4f}; "
          f"peak RSS {summary.peak_bytes / 2**20:.0f} MiB", flush=True)


def install(out: Path, model, config: ReaderConfig, data: dict) -> None:
    """The reader trained in `out`, as trained (fp32: rounded to bf16, it answered 2 fewer of 22 dev questions at
    128K), beside the shipped heads."""
    reader = load_reader(out, model)
    trained = json.loads((out / READER_CONFIG).read_text())
    meta = {"model": NAME, "training": {**asdict(config), **data, "final_loss": trained.get("final_loss")}}
    save_reader(reader, HEADS_ROOT / NAME, model, meta)
    print(f"installed the reader in {HEADS_ROOT / NAME}")


if __name__ == "__main__":
    main()
