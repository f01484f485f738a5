"""Text the tests read: the CLI's shared document (over budget + chunk tokens, with one fact in it), its filler, and
lines of the synthetic task's filler sentences."""

from __future__ import annotations

import random
import textwrap

FILLER = "The river bends past the old mill, where the miller counts his sacks twice a day. "
DOCUMENT = FILLER * 60 + "The gate code of the north depot is 4821. " + FILLER * 60
GATE = "The gate code of the north depot is 4821."


def filler_lines(rng: random.Random, lines: int) -> list[str]:
    """`lines` lines of 80 characters of the synthetic task's filler sentences."""
    from locret_cli.bench.synthetic import filler_sentence

    text = " ".join(filler_sentence(rng) for _ in range(lines * 2))
    return textwrap.wrap(text, 80)[:lines]
