"""Long synthetic documents with facts hidden at chosen depths, and the questions that find them.

The prose is varied filler built from templates and word lists, seeded, so the same seed always gives the same
document. Facts take two forms:
    "The <attribute> of <entity> is <value>."           asked as "What is the <attribute> of <entity>?"
    "The pass key is <digits>. Remember it."             asked as "What is the pass key?"
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SUBJECTS = ["the ferryman", "a tired clerk", "the harbour master", "an old surveyor", "the night guard", "a courier",
            "the archivist", "two apprentices", "the quartermaster", "a visiting engineer", "the cook", "the mayor"]
VERBS = ["inspected", "repaired", "counted", "painted", "described", "measured", "cleaned", "sketched", "questioned",
         "carried", "checked", "ignored"]
OBJECTS = ["the copper pipes", "a crate of lamps", "the eastern gate", "the drainage ditch", "a pile of maps",
           "the signal tower", "the winter stores", "a broken cart", "the ledger", "the timber yard", "the old well"]
PLACES = ["near the river", "behind the granary", "at the crossroads", "on the upper terrace", "beside the quarry",
          "inside the long hall", "under the bridge", "along the canal", "at the market square", "by the lighthouse"]
TIMES = ["before dawn", "late in the evening", "during the spring thaw", "on market day", "after the storm",
         "in the first week of autumn", "at noon", "when the bells rang", "during the long drought"]
ADJECTIVES = ["quiet", "muddy", "crowded", "windy", "forgotten", "narrow", "busy", "cold", "bright", "crooked"]
NOUNS = ["road", "workshop", "harbour", "valley", "garden", "tunnel", "village", "storehouse", "station", "orchard"]
TEMPLATES = [
    "{S} {V} {O} {P} {T}.",
    "{T}, {S} {V} {O}.",
    "Nobody remembers why {S} {V} {O} {P}.",
    "The {A} {N} was where {S} {V} {O}.",
    "According to the records, {S} {V} {O} {T}.",
    "It was {A} {P}, and {S} {V} {O}.",
    "Some say {S} {V} {O}; others say it was never done.",
    "{S} {V} {O} {P}, as the {A} {N} required.",
]
ATTRIBUTES = ["gate code", "radio channel", "storage room", "contact name", "supply day", "alarm word",
              "locker number", "shift leader", "meeting point", "backup frequency"]
PLACE_NAMES = ["north depot", "river station", "west archive", "signal tower", "salt warehouse", "hill observatory",
               "old foundry", "east harbour", "pine lodge", "copper mine", "glass workshop", "lower granary"]
NAMES = ["Amara", "Tobias", "Ingrid", "Kwame", "Lucia", "Dmitri", "Saoirse", "Hiroshi", "Fatima", "Olek", "Priya"]
WORDS = ["lantern", "granite", "meadow", "falcon", "cobalt", "harvest", "juniper", "anchor", "velvet", "thunder"]


@dataclass(frozen=True)
class Fact:
    """A statement hidden in a document, the question that asks for it, and the exact answer."""

    statement: str
    question: str
    answer: str
    kind: str  # "attribute" or "passkey"


def filler_sentence(rng: random.Random) -> str:
    sentence = rng.choice(TEMPLATES).format(
        S=rng.choice(SUBJECTS), V=rng.choice(VERBS), O=rng.choice(OBJECTS), P=rng.choice(PLACES),
        T=rng.choice(TIMES), A=rng.choice(ADJECTIVES), N=rng.choice(NOUNS),
    )
    return sentence[0].upper() + sentence[1:]


def attribute_fact(rng: random.Random) -> Fact:
    attribute, entity = rng.choice(ATTRIBUTES), f"the {rng.choice(PLACE_NAMES)}"
    value = rng.choice([str(rng.randint(1000, 99999)), rng.choice(NAMES), rng.choice(WORDS)])
    return Fact(f"The {attribute} of {entity} is {value}.", f"What is the {attribute} of {entity}?", value, "attribute")


def passkey_fact(rng: random.Random) -> Fact:
    digits = str(rng.randint(10000, 99999))
    return Fact(f"The pass key is {digits}. Remember it.", "What is the pass key?", digits, "passkey")


def paragraphs(rng: random.Random, count: int) -> list[str]:
    """`count` paragraphs of 4-8 filler sentences each."""
    return [" ".join(filler_sentence(rng) for _ in range(rng.randint(4, 8))) for _ in range(count)]


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
