"""Training records for SmolLM2's retaining heads: real prose with facts, and questions whose answers need them.

Each record is one document of `tokens` tokens of prose from the training packages with one to three facts at random
depths, and one question. With one fact, the question asks for it; with more, it asks for all of them at once and the
answer states each, so every fact the document holds is one the answer attends to (docs/training.md: heads learn to
drop what no answer needs). The answer restates the fact as the model does when it answers ("The pass key is ...").
Each record also names every fact's statement as a passage to keep (`locret train --keep-weight`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from locret_cli.inputs.prompt import question_text
from recipes.smollm2 import documents


def reply(fact: documents.Fact) -> str:
    """The sentence that answers `fact`'s question: its statement's first sentence."""
    return fact.statement.split(". ")[0].rstrip(".") + "."


def replied_value(answer: str) -> str:
    """The value a `reply` states: "The pass key is 25992." -> "25992"."""
    return answer.rstrip(".").rsplit(" is ", 1)[-1]


def record(paragraphs: list[str], tokens: int, rng: random.Random) -> dict:
    count = rng.choice((1, 1, 2, 3))
    facts = documents.facts_for(rng, count, passkey=rng.random() < 0.4)[:count]
    depths = [rng.uniform(0.02, 0.98) for _ in facts]
    document = documents.build(paragraphs, tokens, facts, rng.randrange(2**31), depths=depths)
    asked = document.facts
    if len(asked) == 1:
        question = asked[0].question
    else:
        question = " And ".join(f.question for f in asked)
    prompt = document.text.rstrip() + question_text(question)
    # the prompt holds the question as `locret ask` lays it out; the trainer wraps it in the chat template
    return {"prompt": prompt, "answer": " ".join(reply(f) for f in asked), "keep": [f.statement for f in asked]}


def write(paragraphs: list[str], out: Path, examples: int, tokens: int, seed: int) -> Path:
    rng = random.Random(seed)
    with out.open("w") as f:
        for _ in range(examples):
            f.write(json.dumps(record(paragraphs, tokens, rng)) + "\n")
    return out
