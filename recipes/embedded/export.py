"""Write the last finished pretraining stage (OUT/pretrain.pt) as a model directory `locret ask --model` loads.

    python -m recipes.embedded.export --out runs/embedded --to runs/stage-model
"""

from __future__ import annotations

import argparse
from pathlib import Path

from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from recipes.embedded.pretrain import PretrainConfig, export_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/embedded"))
    parser.add_argument("--to", type=Path, required=True)
    args = parser.parse_args()
    tokenizer = TiktokenTokenizer.from_file(args.out / TIKTOKEN_FILE)
    length = export_checkpoint(tokenizer, args.out, PretrainConfig(), args.to)
    print(f"wrote {args.to}: the stage trained on {length}-token documents")


if __name__ == "__main__":
    main()
