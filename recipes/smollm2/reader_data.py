"""Training records for SmolLM2's reader: real prose from the training packages with facts at random depths, and
every fact's question with the sentence that answers it ("The gate code of the north depot is 4821.") and
the value it states ("4821").

Records come in batches (`Batch`), each its own length range and number of facts. A batch may be crowded (many facts
of one code and one role, which only their places tell apart, as in a long document that names the gate codes of a
dozen places) and may name the budget its documents are read at, as a long document is read at the model's budget.
One record is one document and all of its questions: `locret train-reader` reads the document once and asks each
question on a fork of that read. The facts are those of `documents.py`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from recipes.smollm2 import documents
from recipes.smollm2.heads_data import reply


@dataclass(frozen=True)
class Batch:
    """`count` documents of `lengths[0]` to `lengths[1]` tokens (log-uniform), each with `facts[0]` to `facts[1]`
    facts, crowded or not, read at `budget` entries (None: a share the trainer draws)."""

    count: int
    lengths: tuple[int, int]
    facts: tuple[int, int] = (3, 6)
    crowded: bool = False
    budget: int | None = None


def record(paragraphs: list[str], tokens: int, rng: random.Random, facts: tuple[int, int] = (3, 6),
           crowded: bool = False) -> dict:
    count = rng.randint(*facts)
    chosen = documents.facts_for(rng, count, passkey=rng.random() < 0.4, crowded=crowded)[:count]
    depths = [rng.uniform(0.02, 0.98) for _ in chosen]
    document = documents.build(paragraphs, tokens, chosen, rng.randrange(2**31), depths=depths)
    return {"document": document.text,
            "questions": [{"question": f.question, "answer": reply(f), "value": f.answer} for f in document.facts]}


def write(paragraphs: list[str], out: Path, batches: list[Batch], seed: int) -> Path:
    """The batches' records, in order, into `out`. Batch i draws from seed + i, so no batch's records depend on
    another's: adding a batch leaves the records (and reads) of those before it as they were."""
    with out.open("w") as f:
        for offset, batch in enumerate(batches):
            rng = random.Random(seed + offset)
            low, high = batch.lengths
            for _ in range(batch.count):
                tokens = round(low * (high / low) ** rng.random())
                item = record(paragraphs, tokens, rng, batch.facts, batch.crowded)
                f.write(json.dumps(item if batch.budget is None else {**item, "budget": batch.budget}) + "\n")
    return out
