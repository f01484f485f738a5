"""Possessive attributes for the embedded model's training and validation facts ("the keeper's name of ..."), as
users write them: the dev set's are fixed; training's are "<owner>'s <the attribute's last word>", the owner from its
own list or made up, never a dev owner."""

from __future__ import annotations

import random
from collections.abc import Sequence

from locret_cli.bench.synthetic import Fact, invented_word, stated_attribute

POSSESSIVE_ATTRIBUTES = ("keeper's name", "captain's badge", "warden's number", "owner's motto", "porter's code",
                         "clerk's initials", "guard's password", "cook's ration")
TRAIN_OWNERS = ("miller", "ranger", "sexton", "ferryman", "smith", "tanner", "bosun", "mason", "herald", "steward")
DEV_OWNERS = frozenset(attribute.split("'")[0] for attribute in POSSESSIVE_ATTRIBUTES)


def possessive_fact(rng: random.Random, fact: Fact, pieces: Sequence[str] = ()) -> Fact:
    """`fact`, a training attribute fact, with a possessive attribute: "The ferryman's code of ... is ...". The
    owner is one of TRAIN_OWNERS or a made-up word (`invented_word`), never one of DEV_OWNERS."""
    owner = rng.choice(TRAIN_OWNERS) if rng.random() < 0.5 else invented_word(rng, pieces)
    while owner in DEV_OWNERS:
        owner = invented_word(rng, pieces)
    return with_attribute(fact, f"{owner}'s {question_parts(fact.question)[0].split()[-1]}")


def with_attribute(fact: Fact, attribute: str) -> Fact:
    """`fact`, an attribute fact, stating `attribute` instead of its own: the same entity and value."""
    return stated_attribute(attribute, question_parts(fact.question)[1], fact.answer)


def question_parts(question: str) -> tuple[str, str]:
    """(attribute, entity) of a question "What is the <attribute> of <entity>?" (`stated_attribute`)."""
    attribute, entity = question.removeprefix("What is the ").removesuffix("?").split(" of ", 1)
    return attribute, entity
