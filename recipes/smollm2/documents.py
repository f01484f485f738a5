"""Documents of real prose with facts placed at spread depths, and the questions that ask for them.

Three kinds of fact, each stated once and asked as a natural question whose answer is in the passage:
    passkey  "The pass key is 71943. Remember it. 71943 is the pass key."     asked "What is the pass key?"
    code     "The gate code of the north depot is 4821."                       asked "What is the gate code of ...?"
    person   "The chief engineer of the salt warehouse is Ingrid Halvorsen."   asked "Who is the chief engineer of ...?"
A document is seeded: the same paragraphs, length, depths and seed give the same text and questions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

CODES = ["gate code", "radio channel", "locker number", "room number", "account number", "badge number"]
ROLES = ["chief engineer", "head librarian", "night manager", "senior auditor", "lead surveyor", "harbour pilot"]
PLACES = ["north depot", "river station", "west archive", "signal tower", "salt warehouse", "hill observatory",
          "old foundry", "east harbour", "pine lodge", "copper mine", "glass workshop", "lower granary",
          "city museum", "central bakery", "mountain school", "ferry terminal"]
FIRST = ["Amara", "Tobias", "Ingrid", "Kwame", "Lucia", "Dmitri", "Saoirse", "Hiroshi", "Fatima", "Olek", "Priya",
         "Mateo", "Elena", "Rashid", "Yuki", "Nadia", "Henrik", "Chidi", "Marta", "Arjun"]
LAST = ["Halvorsen", "Okafor", "Brennan", "Castillo", "Novak", "Lindqvist", "Mensah", "Tanaka", "Moreau", "Kowalski",
        "Ferreira", "Adeyemi", "Sorensen", "Ivanova", "Quinn", "Haddad"]


@dataclass(frozen=True)
class Fact:
    kind: str  # passkey, code or person
    statement: str
    question: str
    answer: str


def make_fact(kind: str, rng: random.Random, place: str, codes: list[str] = CODES, roles: list[str] = ROLES) -> Fact:
    """One fact of `kind` about `place`, its attribute drawn from `codes` or `roles`."""
    if kind == "passkey":
        key = str(rng.randint(10_000, 99_999))
        return Fact(kind, f"The pass key is {key}. Remember it. {key} is the pass key.", "What is the pass key?", key)
    if kind == "code":
        what, value = rng.choice(codes), str(rng.randint(1000, 9999))
        return Fact(kind, f"The {what} of the {place} is {value}.", f"What is the {what} of the {place}?", value)
    role, name = rng.choice(roles), f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    return Fact(kind, f"The {role} of the {place} is {name}.", f"Who is the {role} of the {place}?", name)


def facts_for(rng: random.Random, count: int, passkey: bool = True, crowded: bool = False) -> list[Fact]:
    """`count` facts about distinct places (the first a pass key when `passkey`), kinds alternating. `crowded` facts
    all share one code and one role ("the gate code of" six places), so only the place tells them apart."""
    places = rng.sample(PLACES, count)
    kinds = (["passkey"] if passkey else []) + [("code", "person")[i % 2] for i in range(count)]
    codes, roles = ([rng.choice(CODES)], [rng.choice(ROLES)]) if crowded else (CODES, ROLES)
    return [make_fact(kind, rng, place, codes, roles) for kind, place in zip(kinds, places)]


@dataclass
class Document:
    text: str
    facts: list[Fact]
    depths: list[float]  # where each fact sits, as a fraction of the document's characters


def build(paragraphs: list[str], tokens: int, facts: list[Fact], seed: int, chars_per_token: float = 4.2,
          depths: list[float] | None = None) -> Document:
    """About `tokens` tokens of shuffled paragraphs (cycled if too few), facts inserted between paragraphs at
    `depths` (default: evenly spread from 5% to 95%)."""
    rng = random.Random(seed)
    order = list(range(len(paragraphs)))
    rng.shuffle(order)
    body, size, i = [], 0, 0
    while size < tokens * chars_per_token:
        body.append(paragraphs[order[i % len(order)]])
        size += len(body[-1]) + 2
        i += 1
    if depths is None:
        depths = [0.05 + 0.9 * (j + 0.5) / len(facts) for j in range(len(facts))]
    placed = sorted(zip(depths, facts), key=lambda pair: pair[0])
    for offset, (depth, fact) in enumerate(placed):
        body.insert(min(len(body), round(depth * len(body))) + offset, fact.statement)
    return Document("\n\n".join(body), [f for _, f in placed], [d for d, _ in placed])

