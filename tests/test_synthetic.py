"""The held-out split of the generated QA data: nothing a dev question asks about appears in training facts."""

from __future__ import annotations

import random

from locret_cli.qa_data import facts_for
from locret_cli.synthetic import SPLIT_ATTRIBUTES, SPLIT_KINDS, SPLIT_WORDS, english_words, novel_fact


def parts(statement: str) -> tuple[str, str, str]:
    """'The <attribute> of the <place> <kind> is <value>.' -> (attribute, kind, value)"""
    attribute, rest = statement.removeprefix("The ").split(" of the ", 1)
    entity, value = rest.rstrip(".").split(" is ", 1)
    return attribute, entity.split()[-1], value


def test_training_facts_never_use_a_dev_attribute_kind_or_word_even_when_invented():
    rng = random.Random(0)
    for invented in (0.0, 0.5, 1.0):
        for fact in facts_for(rng, "train", 400, passkey_chance=0.0, invented=invented):
            attribute, kind, value = parts(fact.statement)
            assert attribute not in SPLIT_ATTRIBUTES["dev"] and kind not in SPLIT_KINDS["dev"], fact.statement
            assert value not in SPLIT_WORDS["dev"], fact.statement
    dev_words = {w for lists in (SPLIT_ATTRIBUTES, SPLIT_KINDS, SPLIT_WORDS) for p in lists["dev"] for w in p.split()}
    assert len(english_words()) > 1000 and not set(english_words()) & dev_words


def test_invented_share_is_respected_and_questions_match_statements():
    rng = random.Random(1)
    listed = {a for a in SPLIT_ATTRIBUTES["train"]}
    facts = [novel_fact(rng, "train", invented=0.5) for _ in range(2000)]
    share = sum(not any(f.statement.startswith(f"The {a} of") for a in listed) for f in facts) / len(facts)
    assert 0.45 < share < 0.55
    for fact in facts[:50]:
        subject = fact.question.removeprefix("What is the ").removesuffix("?")
        assert fact.statement == f"The {subject} is {fact.answer}."
