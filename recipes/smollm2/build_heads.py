"""The recipe for the retaining heads shipped for SmolLM2-135M-Instruct, as one command:

    pip install --no-deps --target runs/prose-packages scipy==1.16.3 pandas==2.3.3 astropy==7.1.1 \\
        sqlalchemy==2.0.44 scikit-learn==1.7.2 statsmodels==0.14.5 django==5.2.8
    python -m recipes.smollm2.build_heads --prose-packages runs/prose-packages --out runs/smollm2

It writes the training records (prose of the training packages only, `prose.py`), trains heads on the model named
`smollm2` with `locret train`'s trainer and its keep loss at weight 1 (checkpoints every 250 steps; run it again to
resume), then copies the heads,
with the model's identity and the engine defaults below, into the package (`locret_cli/models/heads/`):
`recipes/heads_recipe.py`.
Costs measured on 2 CPU cores are in docs/smollm2.md.
"""

from __future__ import annotations

from recipes.heads_recipe import arguments, build

NAME = "smollm2-135m-instruct"
# the keep loss ranks every fact's statement above the rest of its record (`locret train --keep-weight`): the heads
# then leave a cache the model reads at 128K, where the budget keeps 3% of the document
# (docs/measurements/smollm2-reader.md)
KEEP_WEIGHT = 1.0
# engine settings recorded with the heads (docs/smollm2.md, docs/reader.md): the model's 8,192 positions hold
# budget + chunk + question under compact positions; answers come from the window the question's words locate, read
# again whole, and from the bounded cache (with the reader) where none is located or the document does not state the
# window's answer and states the cache's; that cache keeps its entries in blocks of 8 tokens, which the reader was
# trained on; no word is given twice in a row, and only numbers the document holds
DEFAULTS = {"budget": 4096, "chunk_size": 1024, "stabilizers": 256, "score_pool": 1, "span": 8, "reread": 1,
            "reread_tokens": 1024, "locate": "words", "stop_repeats": 8, "word_repeats": False,
            "numbers_from_document": True, "fallback": "unstated"}


def main() -> None:
    build("smollm2", NAME, DEFAULTS, arguments(__doc__, "runs/smollm2", keep_weight=KEEP_WEIGHT))


if __name__ == "__main__":
    main()
