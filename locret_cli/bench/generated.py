"""Generated documents for `locret bench`'s tasks: mixed filler with facts placed at chosen depths.

The filler mixes template prose, a slice of reference text and word salad (`synthetic.py`); each fact's statement
goes in at a paragraph or sentence boundary. The embedded model's recipe builds its training documents the same way.
"""

from __future__ import annotations

import random
import re

from locret_cli.bench.synthetic import Fact, paragraphs, reference_text, word_salad


def filler_block(rng: random.Random, reference: str, paragraph_count: int, characters: int, words: int) -> str:
    """One block of filler: template prose (45%), a slice of real English (35%) or word salad (20%)."""
    source = rng.random()
    if source < 0.45:
        return "\n\n".join(paragraphs(rng, paragraph_count))
    if source < 0.8:
        start = rng.randrange(0, len(reference) - characters - 500)
        return reference[start:start + characters]
    return word_salad(rng, words)


def document_text(tokenizer, rng: random.Random, tokens: int, facts: list[Fact], split: str,
                  depths: list[float] | None = None) -> str:
    """About `tokens` tokens of mixed filler text (prose, `split`'s reference text, word salad) with each fact at a
    paragraph or sentence boundary: a document as a user would hand it to `locret ask`. Boundaries are random, or
    the nearest to `depths` (one per fact, 0 = start, 1 = end)."""
    reference = reference_text(split)
    room = max(1, tokens - sum(len(tokenizer.encode(" " + f.statement)) for f in facts))
    blocks, count = [], 0
    while count < room:
        blocks.append(filler_block(rng, reference, paragraph_count=3, characters=1500, words=120))
        count += len(tokenizer.encode(blocks[-1])) + 1
    return place_facts(tokenizer.decode(tokenizer.encode("\n\n".join(blocks))[:room]), facts, rng, depths)


def place_facts(filler: str, facts: list[Fact], rng: random.Random, depths: list[float] | None = None) -> str:
    """`filler` with each fact's statement inserted at a paragraph or sentence boundary: random ones, or the
    nearest to `depths` (one per fact, 0 = start, 1 = end)."""
    boundaries = [0, len(filler)] + [m.end() for m in re.finditer(r"\n\n|(?<=\.) ", filler)]
    if depths is None:
        places = [rng.choice(boundaries) for _ in facts]
    else:
        places = [min(boundaries, key=lambda b: abs(b - depth * len(filler))) for depth in depths]
    for at, fact in sorted(zip(places, facts), key=lambda x: -x[0]):
        before = "" if at == 0 or filler[at - 1] in " \n" else " "
        filler = f"{filler[:at]}{before}{fact.statement} {filler[at:]}"
    return filler
