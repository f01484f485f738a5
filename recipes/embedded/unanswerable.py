"""Questions a document does not answer, which the embedded model learns to answer `embedded.not_stated_reply`.

Three kinds, from the hardest to the easiest:
- a near miss: a stated entity with an attribute no statement gives it, or a stated attribute of another entity,
  so that answering needs both halves of the question to match a statement, not one;
- a fact of the model's form that nothing in the document resembles, or the pass key where none is given;
- a question of another form (`off_form_question`), such as a request for a summary.

The off-form questions here are built from templates and the training vocabulary; the dev set's own off-form
questions (`recipes/embedded/validation.OFF_FORM_QUESTIONS`) are a fixed list that training never draws.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from locret_cli.bench.synthetic import (
    ADJECTIVES,
    NOUNS,
    OBJECTS,
    SPLIT_ATTRIBUTES,
    SUBJECTS,
    TIMES,
    VERBS,
    Fact,
    invented_word,
    novel_fact,
    pseudo_word,
)
from locret_cli.models.embedded import not_stated_reply
from recipes.embedded.possessive import question_parts

PASSKEY_QUESTION = "What is the pass key?"
OFF_FORM_TEMPLATES = (
    "Summarize section {n}.", "Give a summary of part {n}.", "Who is the author of the {A} {N}?",
    "Why did {S} {V} {O}?", "How many {N}s are mentioned?", "When did {S} {V} {O}?", "What happened {T}?",
    "Where is the {A} {N}?", "What is this text about?", "Which {N} is the oldest?", "Is the {N} {A}?",
    "What does the {a} say about {O}?", "Translate the first paragraph.", "Explain the word {w}.",
    "Who {V} {O}?", "List the {a}s of the {N}.", "What is {w}?", "Tell me about {O}.",
    "Describe the {A} {N}.", "What did {S} think of {O}?", "Write a poem about the {N}.",
    "How old is {S}?", "What is the {a} of the {N} used for?", "Compare the {N} and the {M}.",
)


def absent_fact(question: str) -> Fact:
    """A question the document does not answer, as a fact whose reply is `not_stated_reply(question)`."""
    return Fact("", question, not_stated_reply(question), "absent")


def off_form_question(rng: random.Random, pieces: Sequence[str] = ()) -> str:
    """A question of a form the model does not answer from statements, filled from the training vocabulary."""
    template = rng.choice(OFF_FORM_TEMPLATES)
    return template.format(
        n=rng.randint(1, 12), S=rng.choice(SUBJECTS), V=rng.choice(VERBS), O=rng.choice(OBJECTS),
        T=rng.choice(TIMES), A=rng.choice(ADJECTIVES), N=rng.choice(NOUNS), M=rng.choice(NOUNS),
        a=rng.choice(SPLIT_ATTRIBUTES["train"]),
        w=invented_word(rng, pieces) if rng.random() < 0.5 else pseudo_word(rng),
    )


def near_miss(rng: random.Random, fact: Fact, split: str, invented: float, pieces: Sequence[str]) -> str:
    """A question that shares its entity or its attribute with `fact`'s and changes the other half."""
    other = novel_fact(rng, split, invented, pieces).question  # "What is the <attribute> of <entity>?"
    attribute, entity = question_parts(fact.question)
    other_attribute, other_entity = question_parts(other)
    if rng.random() < 0.5:
        return f"What is the {other_attribute} of {entity}?"
    return f"What is the {attribute} of {other_entity}?"


def absent_question(rng: random.Random, facts: list[Fact], split: str, invented: float = 0.0,
                    pieces: Sequence[str] = (), off_form: bool = True) -> str:
    """A question no fact of `facts` answers: a near miss of a stated attribute fact (half of the time when there
    is one), a fact of the model's form from `split`'s vocabulary, the pass key when none is stated, or (with
    `off_form`) a question of another form."""
    stated = {f.question for f in facts}
    attributes = [f for f in facts if f.kind == "attribute"]
    while True:
        draw = rng.random()
        if off_form and draw < 0.25:
            question = off_form_question(rng, pieces)
        elif attributes and draw < 0.75:
            question = near_miss(rng, rng.choice(attributes), split, invented, pieces)
        elif PASSKEY_QUESTION not in stated and draw < 0.85:
            question = PASSKEY_QUESTION
        else:
            question = novel_fact(rng, split, invented, pieces).question
        if question not in stated:
            return question
