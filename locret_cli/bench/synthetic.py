"""Long synthetic documents with facts hidden at chosen depths, and the questions that find them.

The prose is varied filler built from templates and word lists, seeded, so the same seed always gives the same
document. Facts take two forms:
    "The <attribute> of <entity> is <value>."           asked as "What is the <attribute> of <entity>?"
    "The pass key is <digits>. Remember it."             asked as "What is the pass key?"
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
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


@dataclass(frozen=True)
class Fact:
    """A statement hidden in a document, the question that asks for it, and the exact answer."""

    statement: str
    question: str
    answer: str
    kind: str  # "attribute", "passkey", or "absent" (a question the document does not answer: `unanswerable.py`)

    @property
    def reply(self) -> str:
        """The statement's first sentence, which ends with the answer: "The gate code of the north depot is 4821."
        The embedded model answers this way, so that its answer restates the key it looked up (docs). An absent
        fact's reply is its answer (`embedded.not_stated_reply`)."""
        if self.kind == "absent":
            return self.answer
        return self.statement[: self.statement.rindex(self.answer) + len(self.answer)] + "."


def filler_sentence(rng: random.Random) -> str:
    sentence = rng.choice(TEMPLATES).format(
        S=rng.choice(SUBJECTS), V=rng.choice(VERBS), O=rng.choice(OBJECTS), P=rng.choice(PLACES),
        T=rng.choice(TIMES), A=rng.choice(ADJECTIVES), N=rng.choice(NOUNS),
    )
    return sentence[0].upper() + sentence[1:]


def passkey_fact(rng: random.Random) -> Fact:
    digits = str(rng.randint(10000, 99999))
    return Fact(f"The pass key is {digits}. Remember it.", "What is the pass key?", digits, "passkey")


def paragraphs(rng: random.Random, count: int) -> list[str]:
    """`count` paragraphs of 4-8 filler sentences each."""
    return [" ".join(filler_sentence(rng) for _ in range(rng.randint(4, 8))) for _ in range(count)]


# --- Facts and filler with held-out vocabularies, for training and evaluating the embedded model ---------------
# "train" and "dev" draw attributes, entity kinds and words from disjoint lists, and names from pseudo-words, so a
# model scored on "dev" must copy answers it never saw in training.
SPLIT_ATTRIBUTES = {
    "train": ["gate code", "radio channel", "storage room", "contact name", "supply day", "alarm word", "locker number",
              "shift leader", "meeting point", "backup frequency", "door colour", "parcel tag", "night password",
              "fuel ration", "ledger number", "bell signal", "cellar key", "tide mark", "lamp count", "seal mark"],
    "dev": ["access code", "phone extension", "spare key", "duty officer", "harbour berth", "vault number",
            "signal word", "team mascot", "water ration", "cabinet label", "ticket number", "relay station"],
}
SPLIT_KINDS = {
    "train": ["depot", "station", "archive", "tower", "warehouse", "observatory", "foundry", "harbour", "lodge", "mine",
              "workshop", "granary", "mill", "bakery", "barracks", "chapel", "ferry", "school", "clinic", "forge"],
    "dev": ["hangar", "library", "quarry", "brewery", "pavilion", "kennel", "studio", "embassy", "garage", "market"],
}
SPLIT_WORDS = {
    "train": ["lantern", "granite", "meadow", "falcon", "cobalt", "harvest", "juniper", "anchor", "velvet", "thunder",
              "copper", "saffron", "glacier", "orchid", "pepper", "marble", "willow", "ember", "quartz", "hazel"],
    "dev": ["biscuit", "canyon", "dolphin", "eclipse", "fjord", "gravel", "hammock", "iris", "jasmine", "kettle"],
}
SYLLABLES = ["ka", "lo", "mi", "ren", "dor", "vel", "sa", "tun", "bri", "gal", "os", "pe", "qui", "zan", "hol", "mar",
             "ti", "nek", "ur", "fa", "ly", "con", "bez", "wid", "ar", "do", "ske", "rul", "vin", "ax"]
DIRECTIONS = ["north", "south", "east", "west", "upper", "lower", "old", "new", "inner", "outer"]


def pseudo_word(rng: random.Random) -> str:
    """A pronounceable made-up word, capitalised: a name no word list holds."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def novel_fact(rng: random.Random, split: str, invented: float = 0.0, pieces: Sequence[str] = ()) -> Fact:
    """An attribute fact from `split`'s vocabulary, with a made-up place name half of the time. With probability
    `invented`, the attribute (both its words) and entity kind are made-up words too. Given a tokenizer's word
    `pieces` (training data), word values are always made up (`invented_word`): with a short list to draw from, a
    model recalls list words instead of copying, and cannot copy words made of pieces it never answered with. (With
    made-up attributes ending in one of four words, the fifth run wrote "spare number" for "spare key".)"""
    attribute, kind = rng.choice(SPLIT_ATTRIBUTES[split]), rng.choice(SPLIT_KINDS[split])
    if invented and rng.random() < invented:
        attribute = f"{invented_word(rng, pieces)} {invented_word(rng, pieces)}"
        kind = invented_word(rng, pieces)
    place = pseudo_word(rng) if rng.random() < 0.5 else rng.choice(DIRECTIONS)
    entity = f"the {place} {kind}"
    value = rng.choice([
        str(rng.randint(100, 999999)),
        pseudo_word(rng),
        invented_word(rng, pieces) if pieces else rng.choice(SPLIT_WORDS[split]),
    ])
    return stated_attribute(attribute, entity, value)


def stated_attribute(attribute: str, entity: str, value: str) -> Fact:
    """"The <attribute> of <entity> is <value>.", asked "What is the <attribute> of <entity>?"."""
    return Fact(f"The {attribute} of {entity} is {value}.", f"What is the {attribute} of {entity}?", value, "attribute")


def invented_word(rng: random.Random, pieces: Sequence[str] = ()) -> str:
    """A made-up word of syllables, an English word from the training reference text, or, given a tokenizer's word
    `pieces`, 1-3 of them joined; never a dev-list word. Held-out words split into pieces the filler rarely holds:
    joining pieces makes every one of them something the model has matched and copied in training."""
    while True:
        if pieces and rng.random() < 0.5:
            word = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
        elif rng.random() < 0.5:
            word = pseudo_word(rng).lower()
        else:
            word = rng.choice(english_words())
        if word not in dev_words():
            return word


@functools.cache
def dev_words() -> frozenset[str]:
    """Every word of the dev attributes, kinds and values."""
    return frozenset(w for lists in (SPLIT_ATTRIBUTES, SPLIT_KINDS, SPLIT_WORDS) for phrase in lists["dev"]
                     for w in phrase.split())


@functools.cache
def english_words() -> list[str]:
    """Lowercase words of 5-10 letters from the training side of the reference text, minus function words and
    every dev-list word."""
    function_words = {"which", "there", "their", "where", "these", "those", "other", "about", "above", "after",
                      "before", "being", "could", "would", "should", "while", "whose", "every", "until"}
    found = set(re.findall(r"\b[a-z]{5,10}\b", reference_text("train")))
    return sorted(found - dev_words() - function_words)


def reference_text(split: str) -> str:
    """Real English (Python's reference manual, shipped with CPython): 80% of topics for train, the rest for dev."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    cut = len(names) * 4 // 5
    chosen = names[:cut] if split == "train" else names[cut:]
    return "\n\n".join(topics[name] for name in chosen)


def word_salad(rng: random.Random, words: int) -> str:
    """Sentences of shuffled filler words and made-up words: text with no grammar to lean on."""
    vocabulary = SUBJECTS + OBJECTS + PLACES + ADJECTIVES + NOUNS
    out = []
    while len(out) < words:
        sentence = " ".join(rng.choice(vocabulary) if rng.random() < 0.7 else pseudo_word(rng).lower()
                            for _ in range(rng.randint(4, 12)))
        out.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(out)
