"""The pretraining's own validation split: documents made exactly as the dev set's (`evaluate.py`: held-out
vocabulary and reference text, one pass key and four attribute facts), from a seed range of their own, so that
choosing the best checkpoint on them leaves the dev figures unbiased.

Accuracy is teacher-forced: an answer counts when every one of its tokens, the end token included, is the model's
top choice after the tokens before it. That is exactly when greedy decoding writes it, so the figure is the exact
match `evaluate.py` reports with a full cache (which may cut the document into tokens a little differently, chunk
by chunk), at the cost of one forward pass per question.
"""

from __future__ import annotations

import random

import torch

from locret_cli.bench.generated import document_text
from locret_cli.bench.synthetic import Fact, novel_fact, passkey_fact
from locret_cli.inputs.prompt import build_prompt
from recipes.embedded.possessive import POSSESSIVE_ATTRIBUTES, with_attribute
from recipes.embedded.qa_data import IGNORE, Example, answer_text, collate, prose_text
from recipes.embedded.unanswerable import PASSKEY_QUESTION, absent_fact, absent_question, near_miss

# Questions of other forms than the model's, for the dev set only: a document never answers them.
OFF_FORM_QUESTIONS = ("Summarise chapter 3.", "Who wrote this document?", "How many pages does the report have?",
                      "What is the main argument of the second section?", "Why did the project fail?",
                      "List every date mentioned.")

# Documents 50,000 + d; the dev set's are 10,000 + 97 * length + d (evaluate.DEV_SEED), 204,000 and up at its lengths.
VALIDATION_SEED = 50_000
ABSENT_VALIDATION_SEED = 60_000  # the absent questions' own stream, so the documents stay as they were


def dev_document(tokenizer, rng: random.Random, length: int, attributes: int = 4,
                 passkey: bool = True, possessive: bool = False) -> tuple[list[Fact], str]:
    """A dev-style document of about `length` tokens: held-out vocabulary and reference text, a pass key (unless
    `passkey` is off) and `attributes` attribute facts at random depths (`dev_facts`). Returns (facts, text)."""
    facts = dev_facts(rng, attributes, passkey, possessive)
    return facts, document_text(tokenizer, rng, length, facts, "dev")


def dev_facts(rng: random.Random, attributes: int, passkey: bool, possessive: bool = False) -> list[Fact]:
    """A pass key (unless `passkey` is off) and `attributes` facts in the dev vocabulary; with `possessive`, each
    attribute is a possessive one instead (`POSSESSIVE_ATTRIBUTES`), the entities, values and the rest of the
    document drawn exactly as without it."""
    key = passkey_fact(rng)  # drawn either way, so the attribute facts are the same with or without it
    facts = ([key] if passkey else []) + [novel_fact(rng, "dev") for _ in range(attributes)]
    if possessive:
        facts = [with_possessive(f) if f.kind == "attribute" else f for f in facts]
    return list({f.question: f for f in facts}.values())


def with_possessive(fact: Fact) -> Fact:
    """`fact` with a possessive attribute, chosen by its own question so that no other draw moves."""
    return with_attribute(fact, random.Random(fact.question).choice(POSSESSIVE_ATTRIBUTES))


def prose_document(tokenizer, rng: random.Random, length: int, paragraphs: list[str], attributes: int = 4,
                   passkey: bool = True, possessive: bool = False) -> tuple[list[Fact], str]:
    """`dev_document`'s facts (the same ones, seed for seed) in filler of real prose: `paragraphs` drawn at random
    (`recipes/prose.py`, packages training never read), cut to about `length` tokens. Returns (facts, text)."""
    facts = dev_facts(rng, attributes, passkey, possessive)
    return facts, prose_text(tokenizer, rng, length, facts, paragraphs)


def absent_questions(rng: random.Random, facts: list[Fact], count: int) -> list[str]:
    """`count` questions the document does not answer, in turn: "What is the <attribute> of <entity>?" in the dev
    vocabulary for a pair no fact states, a question of another form (`OFF_FORM_QUESTIONS`), and a near miss (a
    stated entity with another attribute, or a stated attribute of another entity: `unanswerable.near_miss`)."""
    stated = {f.question for f in facts}
    attributes = [f for f in facts if f.kind == "attribute"]
    questions = []
    while len(questions) < count:
        turn = len(questions) % 3
        if turn == 1:
            questions.append(rng.choice(OFF_FORM_QUESTIONS))
            continue
        question = (near_miss(rng, rng.choice(attributes), "dev", 0.0, ()) if turn == 2 and attributes
                    else novel_fact(rng, "dev").question)
        if question not in stated and question != PASSKEY_QUESTION:
            questions.append(question)
    return questions


def validation_set(tokenizer, documents: int, length: int = 2000,
                   absent: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One batch per document: (input_ids, labels), both (questions, T) int64, a row per question asked on its own
    after the whole document, labels IGNORE except on the answer and its end token. With `absent`, that many more
    rows per document ask what it does not say, in the model's own forms (`unanswerable.absent_question`, no
    off-form question: the dev set's are held out), answered `embedded.not_stated_reply`."""
    batches = []
    for d in range(documents):
        facts, text = dev_document(tokenizer, random.Random(VALIDATION_SEED + d), length)
        questions = random.Random(ABSENT_VALIDATION_SEED + d)
        absent_facts = [absent_fact(absent_question(questions, facts, "dev", off_form=False)) for _ in range(absent)]
        rows = []
        for fact in facts + absent_facts:
            prompt = build_prompt(tokenizer, fact.question)
            context = prompt.prefix_ids + tokenizer.encode(text) + prompt.question_ids
            answer = tokenizer.encode(answer_text(fact)) + [tokenizer.eos_token_id]
            rows.append(Example(context + answer, [IGNORE] * len(context) + answer, facts, [fact]))
        batches.append(collate(rows))
    return batches
