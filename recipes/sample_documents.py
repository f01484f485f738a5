"""Filler documents with attribute facts at chosen depths ("The gate code of the north depot is 4821."): the
samples' handbook (`make_samples.py`), the batch benchmark's corpus and the loading tests."""

from __future__ import annotations

import random

from locret_cli.bench.synthetic import ATTRIBUTES, Fact, paragraphs, stated_attribute

PLACE_NAMES = ["north depot", "river station", "west archive", "signal tower", "salt warehouse", "hill observatory",
               "old foundry", "east harbour", "pine lodge", "copper mine", "glass workshop", "lower granary"]
NAMES = ["Amara", "Tobias", "Ingrid", "Kwame", "Lucia", "Dmitri", "Saoirse", "Hiroshi", "Fatima", "Olek", "Priya"]
WORDS = ["lantern", "granite", "meadow", "falcon", "cobalt", "harvest", "juniper", "anchor", "velvet", "thunder"]


def attribute_fact(rng: random.Random) -> Fact:
    attribute, entity = rng.choice(ATTRIBUTES), f"the {rng.choice(PLACE_NAMES)}"
    value = rng.choice([str(rng.randint(1000, 99999)), rng.choice(NAMES), rng.choice(WORDS)])
    return stated_attribute(attribute, entity, value)


def document(seed: int, paragraphs_count: int, facts: list[tuple[Fact, float]]) -> str:
    """Filler paragraphs with each (fact, depth) placed at `depth` in [0, 1] of the way through."""
    rng = random.Random(seed)
    body = paragraphs(rng, paragraphs_count)
    for fact, depth in sorted(facts, key=lambda item: -item[1]):
        at = min(len(body), round(depth * len(body)))
        body.insert(at, fact.statement)
    return "\n\n".join(body) + "\n"


def distinct_facts(rng: random.Random, count: int) -> list[Fact]:
    """`count` attribute facts whose questions all differ, so each question has one answer."""
    facts: dict[str, Fact] = {}
    while len(facts) < count:
        fact = attribute_fact(rng)
        facts.setdefault(fact.question, fact)
    return list(facts.values())
