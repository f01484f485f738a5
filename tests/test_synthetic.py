"""The generated QA data: its held-out split (nothing a dev question asks about appears in training facts), and
documents fragmented as an evicted cache holds them."""

from __future__ import annotations

import random
import re
import string

from locret_cli.bench.synthetic import (
    SPLIT_ATTRIBUTES,
    SPLIT_KINDS,
    SPLIT_WORDS,
    dev_words,
    english_words,
    novel_fact,
    passkey_fact,
)
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from recipes.embedded.possessive import POSSESSIVE_ATTRIBUTES, TRAIN_OWNERS
from recipes.embedded.qa_data import FillerPool, facts_for, fragments, prose_text, qa_example, word_pieces
from recipes.embedded.validation import OFF_FORM_QUESTIONS, absent_questions, dev_facts

# Pieces that join into dev words ("kennel", "biscuit") or are dev words ("market"): never allowed out whole.
RISKY_PIECES = ("ken", "nel", "bis", "cuit", "market", "ab", "c", "o")


def parts(statement: str) -> tuple[str, str, str]:
    """'The <attribute> of the <place> <kind> is <value>.' -> (attribute, kind, value)"""
    attribute, rest = statement.removeprefix("The ").split(" of the ", 1)
    entity, value = rest.rstrip(".").split(" is ", 1)
    return attribute, entity.split()[-1], value


def test_training_facts_never_use_a_dev_attribute_kind_or_word_even_when_invented():
    rng = random.Random(0)
    for pieces in ((), RISKY_PIECES):
        for invented in (0.0, 0.5, 1.0):
            for fact in facts_for(rng, "train", 400, passkey_chance=0.0, invented=invented, pieces=pieces):
                attribute, kind, value = parts(fact.statement)
                assert attribute not in SPLIT_ATTRIBUTES["dev"] and kind not in SPLIT_KINDS["dev"], fact.statement
                made_up = [value.lower()] + ([] if attribute in SPLIT_ATTRIBUTES["train"] else [*attribute.split(), kind])
                assert not set(made_up) & dev_words(), fact.statement
    assert {"kennel", "biscuit", "market", "harbour"} <= dev_words()
    assert len(english_words()) > 1000 and not set(english_words()) & dev_words()


def test_with_pieces_word_values_are_made_up_never_from_the_training_list():
    rng = random.Random(2)
    values = [novel_fact(rng, "train", pieces=RISKY_PIECES).answer for _ in range(600)]
    words = [v for v in values if v.islower()]
    assert len(words) > 100 and not set(words) & set(SPLIT_WORDS["train"])
    # Only a join of pieces matches this: made-up syllable words hold letters no piece has, English words are excluded.
    pattern = re.compile(f"(?:{'|'.join(RISKY_PIECES)}){{1,3}}")
    joined = [w for w in words if pattern.fullmatch(w) and w not in english_words()]
    assert joined, "some word values are joined from the given pieces"


def test_word_pieces_are_the_tokenizers_lowercase_letter_tokens():
    assert word_pieces(TiktokenTokenizer.byte_level()) == tuple(string.ascii_lowercase)


def test_invented_share_is_respected_and_questions_match_statements():
    rng = random.Random(1)
    listed = {a for a in SPLIT_ATTRIBUTES["train"]}
    facts = [novel_fact(rng, "train", invented=0.5) for _ in range(2000)]
    share = sum(not any(f.statement.startswith(f"The {a} of") for a in listed) for f in facts) / len(facts)
    assert 0.45 < share < 0.55
    # No slot of a made-up attribute comes from a short list: a model would learn the list instead of copying.
    made_up = [f.statement.removeprefix("The ").split(" of the ")[0] for f in facts
               if not any(f.statement.startswith(f"The {a} of") for a in listed)]
    assert len({a.split()[-1] for a in made_up}) > len(made_up) // 2
    for fact in facts[:50]:
        subject = fact.question.removeprefix("What is the ").removesuffix("?")
        assert fact.statement == f"The {subject} is {fact.answer}."


def test_reply_is_the_statements_sentence_ending_in_the_answer():
    rng = random.Random(3)
    assert passkey_fact(rng).reply.startswith("The pass key is ")
    key = passkey_fact(random.Random(4))
    assert key.reply == f"The pass key is {key.answer}." and key.statement == key.reply + " Remember it."
    for fact in (novel_fact(rng, "dev") for _ in range(50)):
        assert fact.reply == fact.statement


def test_fragments_keep_whole_runs_in_order():
    tokens = list(range(200))
    assert fragments(random.Random(0), tokens, 1.0) == tokens and fragments(random.Random(0), tokens, 0.0) == []
    kept = fragments(random.Random(3), tokens, 0.3)
    assert kept == sorted(kept) and 0 < len(kept) < 120  # an ordered subset of the text, about 30% of it
    assert any(b == a + 1 for a, b in zip(kept, kept[1:]))  # in runs, not single tokens


def test_fragmented_documents_keep_every_statement_whole():
    tokenizer = TiktokenTokenizer.byte_level()
    pool = FillerPool(tokenizer.encode("Filler words about the harbour and the mill. " * 400))
    rng = random.Random(5)
    facts = facts_for(rng, "train", 3, 0.0)
    whole = qa_example(random.Random(1), tokenizer, pool, 600, facts, 2)
    cut = qa_example(random.Random(1), tokenizer, pool, 600, facts, 2, fragmented=1.0)
    text = tokenizer.decode(cut.input_ids)
    assert all(f.statement in text for f in facts)
    assert "harbour and the mill" in tokenizer.decode(whole.input_ids) and text != tokenizer.decode(whole.input_ids)
    assert abs(len(cut.input_ids) - len(whole.input_ids)) < 60


def test_prose_documents_hold_every_fact_in_the_given_paragraphs_only():
    tokenizer = TiktokenTokenizer.byte_level()
    paragraphs = [f"Paragraph {n} explains how the solver converges. It stops when the error is small." for n in
                  range(30)]
    facts = facts_for(random.Random(2), "train", 4, 1.0)
    text = prose_text(tokenizer, random.Random(7), 900, facts, paragraphs)
    assert text == prose_text(tokenizer, random.Random(7), 900, facts, paragraphs)  # seeded
    assert all(text.count(f.statement) == 1 for f in facts)
    for fact in facts:
        text = text.replace(fact.statement, "")
    pieces = [re.sub(" +", " ", p).strip() for p in text.split("\n\n") if p.strip()]
    assert all(p in "\n\n".join(paragraphs) for p in pieces[:-1])  # only the last may be cut short
    assert 850 <= len(tokenizer.encode(prose_text(tokenizer, random.Random(7), 900, facts, paragraphs))) <= 920


def test_fragmented_prose_keeps_statements_whole_among_runs_of_a_longer_text():
    tokenizer = TiktokenTokenizer.byte_level()
    paragraphs = [f"Paragraph {n} explains how the solver converges." for n in range(200)]
    facts = facts_for(random.Random(2), "train", 3, 1.0)
    text = prose_text(tokenizer, random.Random(7), 900, facts, paragraphs, keep=0.2)
    assert all(text.count(f.statement) == 1 for f in facts)
    rest = text
    for fact in facts:
        rest = rest.replace(fact.statement, "")
    assert "explains how the solver converges" not in rest and sum(c.isalpha() for c in rest) > 300  # runs of it
    assert 850 <= len(tokenizer.encode(text)) <= 920


def test_absent_questions_never_ask_what_the_document_states():
    rng = random.Random(4)
    facts = [novel_fact(rng, "dev") for _ in range(40)] + [passkey_fact(rng)]
    questions = absent_questions(random.Random(9), facts, 30)
    assert len(questions) == 30 and not {f.question for f in facts} & set(questions)
    assert all(q in OFF_FORM_QUESTIONS for q in questions[1::3])
    assert all(re.fullmatch(r"What is the .+ of .+\?", q) for q in questions[0::3] + questions[2::3])
    halves = [f.question[len("What is the "):-1].split(" of ", 1) for f in facts if f.kind == "attribute"]
    misses = [q[len("What is the "):-1].split(" of ", 1) for q in questions[2::3]]
    assert all(any(a == attribute or e == entity for attribute, entity in halves) for a, e in misses)


def test_possessive_dev_facts_change_only_the_attributes():
    for seed in range(20):
        plain, possessive = (dev_facts(random.Random(seed), 4, True, p) for p in (False, True))
        assert [f.kind for f in plain] == [f.kind for f in possessive]
        for before, after in zip(plain, possessive):
            if before.kind == "passkey":
                assert after == before
                continue
            attribute, kind, value = parts(after.statement)
            assert attribute in POSSESSIVE_ATTRIBUTES and (kind, value) == parts(before.statement)[1:]
            assert after.answer == before.answer and after.question == f"What is the {attribute} of the " \
                + after.statement.split(" of the ", 1)[1].split(" is ")[0] + "?"
    assert all("'s " in a and a not in SPLIT_ATTRIBUTES["train"] for a in POSSESSIVE_ATTRIBUTES)


def test_training_possessives_keep_the_fact_and_never_use_a_dev_owner():
    dev_owners = {a.split("'")[0] for a in POSSESSIVE_ATTRIBUTES}
    owners = []
    for seed in range(200):
        plain = facts_for(random.Random(seed), "train", 6, 0.3, 0.5, RISKY_PIECES)
        mixed = facts_for(random.Random(seed), "train", 6, 0.3, 0.5, RISKY_PIECES, possessive=0.5)
        assert len({f.question for f in mixed}) == len(mixed) == 6
        if plain[0].kind == "passkey":  # drawn before any attribute, so possessives do not move it
            assert mixed[0] == plain[0]
        for fact in mixed:
            if "'s " not in fact.statement:
                continue
            attribute, kind, value = parts(fact.statement)
            owner, noun = attribute.split("'s ")
            owners.append(owner)
            assert owner not in dev_owners and " " not in noun
            assert fact.question == f"What is the {attribute} of the {fact.statement.split(' of the ', 1)[1].split(' is ')[0]}?"
            assert fact.answer == value and kind not in SPLIT_KINDS["dev"]
    assert 0.3 < len(owners) / (200 * 6) < 0.5  # about half the attribute facts; pass keys are never possessive
    assert set(TRAIN_OWNERS) & set(owners) and set(owners) - set(TRAIN_OWNERS)  # listed owners and made-up ones
    assert facts_for(random.Random(3), "train", 6, 0.3, 0.5) == facts_for(random.Random(3), "train", 6, 0.3, 0.5,
                                                                              possessive=0.0)
