"""Questions of every kind an answer from a long document meets, in the Paul Graham essays (`haystack.py`).

Each document of the `kinds` task holds one question of each kind, at depths that turn from one document to the
next, so that a run of N documents asks N questions of each kind spread over the document's depth, as RULER lays
out its grid of lengths and depths:

    fact         "The door code of the amber quarry is 4821."            "What is the door code of the amber quarry?"
    paraphrase   "Callers reach the cedar hall by dialling 3307."        "What is the phone extension of the cedar hall?"
    distractor   the vault number of the north mill, beside those of the south mill and the north kiln
    passkey      "The pass key is 71943. ..." in prose where sentences about keys and passing recur throughout
    two-hop      "The choir meets in room 12." far from "The key of room 12 is held by Ilse Varga."
                                                                         "Who holds the key of the room where the choir meets?"
    multi        three facts asked in one question; right only when the answer holds all three values

Entities, attributes and sentence forms are their own, apart from those any locret training recipe uses. Values are
drawn from a seed per document, the same on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

COMMON_EVERY = 2000  # characters (about 500 tokens) between sentences of COMMON_WORDS
KINDS = ("fact", "paraphrase", "distractor", "passkey", "two-hop", "multi")
PLACES = ["amber quarry", "birch clinic", "cedar hall", "dune lighthouse", "elm brewery", "fern nursery",
          "granite dock", "hazel orchard", "iron bridge", "juniper inn", "kelp farm", "linen mill", "maple chapel",
          "nettle barn", "oak tannery", "pebble school"]
DIRECTIONS = ["north", "south", "east", "west"]
SITES = ["mill", "kiln", "wharf", "forge", "depot", "stable"]
GROUPS = ["choir", "chess club", "finance board", "garden society", "rowing crew", "film circle"]
FIRST = ["Ilse", "Bruno", "Céline", "Tariq", "Greta", "Anselm", "Noor", "Vikram", "Liesel", "Osman", "Petra", "Joaquin"]
LAST = ["Varga", "Lindgren", "Okonkwo", "Marchetti", "Dubois", "Kaminski", "Alvarez", "Strand", "Ishikawa", "Pereira"]
# attribute: (the question's words, a statement in other words: {place}, {value})
ATTRIBUTES = {
    "door code": "To open the front door of the {place}, staff type {value} on the keypad.",
    "phone extension": "Callers reach the {place} by dialling {value} after the main number.",
    "vault number": "The {place} keeps its oldest records locked in vault {value}.",
    "shelf number": "Every ledger of the {place} is filed on shelf {value}.",
    "parking bay": "Visitors to the {place} leave their cars in bay {value}.",
}
COMMON_WORDS = [  # recur through every document, so "pass" and "key" locate nothing
    "The key is to pass over what does not matter.", "Every key decision had to pass a second test.",
    "They would pass the key question to someone else.", "A key reason to pass on it was time.",
    "Let the key idea pass through several drafts.", "The key point will pass unnoticed by most readers.",
]


@dataclass(frozen=True)
class Placed:
    """One question of one kind, the sentences it needs (each put in at its own depth) and its answer's values."""

    kind: str
    question: str
    values: tuple[str, ...]  # an answer is right when it holds every one
    sentences: tuple[tuple[float, str], ...]  # (depth, sentence)


def _value(rng: random.Random) -> str:
    return str(rng.randint(1000, 9999))


def _name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def questions_for(rng: random.Random, depths: dict[str, float]) -> list[Placed]:
    """One question of each kind, its sentences at `depths[kind]` (two-hop's second, and multi's others, spread from
    it)."""
    places = rng.sample(PLACES, 6)
    attributes = list(ATTRIBUTES)
    out = []
    attribute, value = rng.choice(attributes), _value(rng)
    out.append(Placed("fact", f"What is the {attribute} of the {places[0]}?", (value,),
                      ((depths["fact"], f"The {attribute} of the {places[0]} is {value}."),)))
    attribute, value = rng.choice(attributes), _value(rng)
    out.append(Placed("paraphrase", f"What is the {attribute} of the {places[1]}?", (value,),
                      ((depths["paraphrase"], ATTRIBUTES[attribute].format(place=places[1], value=value)),)))
    direction, site = rng.choice(DIRECTIONS), rng.choice(SITES)
    others = [(d, site) for d in DIRECTIONS if d != direction][:2] + [(direction, rng.choice(
        [s for s in SITES if s != site]))]
    attribute, value = rng.choice(attributes), _value(rng)
    near = [(f"{d} {s}", _value(rng)) for d, s in others]
    depth = depths["distractor"]
    statements = [(depth, f"The {attribute} of the {direction} {site} is {value}.")]
    statements += [(min(0.98, max(0.02, depth + offset)), f"The {attribute} of the {place} is {v}.")
                   for offset, (place, v) in zip((-0.04, 0.03, 0.06), near)]
    out.append(Placed("distractor", f"What is the {attribute} of the {direction} {site}?", (value,),
                      tuple(statements)))
    key = str(rng.randint(10_000, 99_999))
    out.append(Placed("passkey", "What is the pass key?", (key,),
                      ((depths["passkey"], f"The pass key is {key}. Remember it. {key} is the pass key."),)))
    group, room, holder = rng.choice(GROUPS), str(rng.randint(10, 99)), _name(rng)
    first, second = depths["two-hop"], (depths["two-hop"] + 0.45) % 0.9 + 0.05
    out.append(Placed("two-hop", f"Who holds the key of the room where the {group} meets?", (holder,),
                      ((first, f"The {group} meets in room {room}."),
                       (second, f"The key of room {room} is held by {holder}."))))
    chosen = rng.sample(attributes, 3)
    values = tuple(_value(rng) for _ in chosen)
    spots = [(depths["multi"] + 0.3 * i) % 0.9 + 0.05 for i in range(3)]
    asked = ", ".join(f"the {a} of the {p}" for a, p in zip(chosen[:2], places[2:4]))
    out.append(Placed("multi", f"What are {asked} and the {chosen[2]} of the {places[4]}?", values,
                      tuple((d, f"The {a} of the {p} is {v}.") for d, a, p, v in
                            zip(spots, chosen, places[2:5], values))))
    return out


def kind_depths(index: int, samples: int) -> dict[str, float]:
    """Where document `index` of `samples` puts each kind's first sentence: turning by a sixth of the document for
    each kind, and by 1/samples from one document to the next, within 5-95%."""
    return {kind: 0.05 + 0.9 * ((index / max(samples, 1) + k / len(KINDS)) % 1.0) for k, kind in enumerate(KINDS)}


def with_sentences(text: str, placed: list[tuple[float, str]], rng: random.Random) -> str:
    """`text` with each (depth, sentence) put in after the last sentence that ends before its depth, and a sentence
    of COMMON_WORDS at the first sentence end after every COMMON_EVERY characters."""
    cuts, at = [], text.find(". ")
    while at >= 0:
        cuts.append(at + 2)
        at = text.find(". ", at + 2)
    marks = sorted({next((c for c in cuts if c >= at), None) for at in range(COMMON_EVERY, len(text), COMMON_EVERY)}
                   - {None})
    inserts = [(cut, rng.choice(COMMON_WORDS)) for cut in marks]
    for depth, sentence in placed:
        target = round(depth * len(text))
        before = [c for c in cuts if c <= target]
        inserts.append((before[-1] if before else 0, sentence))
    pieces, last = [], 0
    for cut, sentence in sorted(inserts, key=lambda item: item[0]):
        pieces += [text[last:cut], sentence + " "]
        last = cut
    return "".join(pieces) + text[last:]
