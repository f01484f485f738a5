"""Training records for SmolLM2's reader: real prose from the training packages with facts at random depths, and
every fact's question with the sentence that answers it ("The gate code of the north depot is 4821."). Crowded
records follow the plain ones: many facts of one code and one role, which only their places tell apart, as in a
long document that names the gate codes of a dozen places.

One record is one document and all of its questions: `locret train-reader` reads the document once and asks each
question on a fork of that read. Lengths are drawn from `lengths`; the facts are those of `documents.py`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from recipes.smollm2 import documents
from recipes.smollm2.heads_data import reply


def record(paragraphs: list[str], tokens: int, rng: random.Random, facts: tuple[int, int] = (3, 6),
           crowded: bool = False) -> dict:
    count = rng.randint(*facts)
    chosen = documents.facts_for(rng, count, passkey=rng.random() < 0.4, crowded=crowded)[:count]
    depths = [rng.uniform(0.02, 0.98) for _ in chosen]
    document = documents.build(paragraphs, tokens, chosen, rng.randrange(2**31), depths=depths)
    return {"document": document.text,
            "questions": [{"question": f.question, "answer": reply(f)} for f in document.facts]}


def write(paragraphs: list[str], out: Path, count: int, lengths: tuple[int, int], seed: int,
          facts: tuple[int, int] = (3, 6), crowded: int = 0, crowded_facts: tuple[int, int] = (8, 12)) -> Path:
    """`count` records of `lengths[0]` to `lengths[1]` tokens (log-uniform), each with `facts[0]` to `facts[1]`
    facts, then `crowded` records with `crowded_facts[0]` to `crowded_facts[1]` crowded facts, into `out`. The
    plain records do not depend on the crowded ones."""
    streams = [(random.Random(seed), count, facts, False), (random.Random(seed + 1), crowded, crowded_facts, True)]
    with out.open("w") as f:
        for rng, many, per_record, crowd in streams:
            for _ in range(many):
                tokens = round(lengths[0] * (lengths[1] / lengths[0]) ** rng.random())
                f.write(json.dumps(record(paragraphs, tokens, rng, per_record, crowd)) + "\n")
    return out
