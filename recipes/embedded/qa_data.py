"""Question-answer examples built at the token level: filler from a pool, facts inserted, questions appended.

An example is laid out exactly as `locret ask` lays out a prompt (`prompt.build_prompt`): the chat template's head,
the document, the question and template tail, then the answer and an end token. Extra questions follow as further
chat turns, so each document supervises several answers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from locret_cli.bench.generated import filler_block, place_facts
from locret_cli.bench.synthetic import Fact, novel_fact, passkey_fact, reference_text
from locret_cli.inputs.prompt import build_prompt
from recipes.embedded.possessive import possessive_fact
from recipes.embedded.unanswerable import absent_fact

IGNORE = -100


class FillerPool:
    """A long token array of filler to cut documents from: mixed (`generated`) or real prose (`of_paragraphs`)."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens

    @classmethod
    def generated(cls, tokenizer, split: str, seed: int, characters: int = 1_200_000) -> FillerPool:
        """Template prose, `split`'s reference text and word salad, in seeded blocks of about `characters` in all."""
        rng = random.Random(seed)
        reference = reference_text(split)
        pieces, size = [], 0
        while size < characters:
            pieces.append(filler_block(rng, reference, paragraph_count=4, characters=2500, words=300))
            size += len(pieces[-1])
        return cls(tokenizer.encode("\n\n".join(pieces)))

    @classmethod
    def of_paragraphs(cls, tokenizer, paragraphs: Sequence[str], seed: int) -> FillerPool:
        """A pool of real prose: `paragraphs` (`recipes/prose.py`) in a seeded order."""
        order = list(paragraphs)
        random.Random(seed).shuffle(order)
        return cls(tokenizer.encode("\n\n".join(order)))

    def filler(self, rng: random.Random, count: int) -> list[int]:
        """`count` tokens made of 1-4 windows from random places in the pool."""
        windows = rng.randint(1, 4)
        cuts = sorted(rng.sample(range(1, count), windows - 1)) if count > windows else []
        out = []
        for length in (b - a for a, b in zip([0, *cuts], [*cuts, count])):
            start = rng.randrange(0, len(self.tokens) - length)
            out.extend(self.tokens[start:start + length])
        return out


def fragments(rng: random.Random, tokens: list[int], keep: float) -> list[int]:
    """Runs of 1-8 tokens of `tokens`, each kept with probability `keep`, in order."""
    out, at = [], 0
    while at < len(tokens):
        run = rng.randint(1, 8)
        if rng.random() < keep:
            out.extend(tokens[at:at + run])
        at += run
    return out


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]  # IGNORE except at answer tokens and their end token
    facts: list[Fact]
    asked: list[Fact]


def prose_text(tokenizer, rng: random.Random, tokens: int, facts: list[Fact], paragraphs: Sequence[str],
               keep: float = 1.0) -> str:
    """`document_text` with filler of real prose: `paragraphs` drawn at random, cut to about `tokens` tokens with
    the facts, each fact at a random paragraph or sentence boundary. With `keep` below 1, the filler is prose
    1/keep times as long cut to runs (`fragments`), as a bounded cache holds it; the statements stay whole."""
    room = max(1, tokens - sum(len(tokenizer.encode(" " + f.statement)) for f in facts))
    chosen, count = [], 0
    while count < room / keep:
        chosen.append(rng.choice(paragraphs))
        count += len(tokenizer.encode(chosen[-1])) + 1
    filler = tokenizer.encode("\n\n".join(chosen))
    if keep < 1:
        filler = fragments(rng, filler, keep)
    return place_facts(tokenizer.decode(filler[:room]), facts, rng)


def facts_for(rng: random.Random, split: str, count: int, passkey_chance: float, invented: float = 0.0,
              pieces: Sequence[str] = (), possessive: float = 0.0) -> list[Fact]:
    """`count` facts with distinct questions; one of them a pass key with probability `passkey_chance`; a share
    `invented` of attribute facts with made-up attributes, some joined from word `pieces` (`novel_fact`), and a
    share `possessive` with a possessive attribute (`possessive_fact`)."""
    facts: dict[str, Fact] = {}
    if rng.random() < passkey_chance:
        facts["passkey"] = passkey_fact(rng)
    while len(facts) < count:
        fact = novel_fact(rng, split, invented, pieces)
        if possessive and rng.random() < possessive:  # no draw at 0: data without possessives stay as they were
            fact = possessive_fact(rng, fact, pieces)
        facts.setdefault(fact.question, fact)
    return list(facts.values())


def word_pieces(tokenizer) -> tuple[str, ...]:
    """The tokenizer's tokens that are lowercase letters (leading space dropped): what made-up words are joined from
    so that every piece a word can split into is trained (`synthetic.invented_word`)."""
    texts = {tokenizer.decode([i]).strip() for i in range(len(tokenizer))}
    return tuple(sorted(t for t in texts if re.fullmatch(r"[a-z]+", t)))


def qa_example(
    rng: random.Random,
    tokenizer,
    pool: FillerPool,
    document_tokens: int,
    facts: list[Fact],
    questions: int,
    fragmented: float = 0.0,
    absent: float = 0.0,
    absent_questions: Callable[[random.Random, list[Fact]], str] | None = None,
) -> Example:
    """A document of about `document_tokens` tokens holding `facts`, then `questions` questions about them, each
    drawn independently (repeats allowed), so no answer follows by elimination from the questions before it. With
    probability `absent` a question is one the document does not answer, from `absent_questions(rng, facts)`
    (`unanswerable.absent_question`), answered `embedded.not_stated_reply`.

    With probability `fragmented` the filler is cut to scattered runs of a longer text (`fragments`), as a bounded
    cache holds it after eviction; the statements stay whole."""
    statements = [tokenizer.encode(rng.choice([" ", "\n", "\n\n"]) + f.statement + rng.choice([" ", "\n"]))
                  for f in facts]
    room = max(len(facts) + 1, document_tokens - sum(map(len, statements)))
    if fragmented and rng.random() < fragmented:  # no draw at 0: earlier stages' data stay as they were
        keep = rng.uniform(0.05, 0.5)
        filler = fragments(rng, pool.filler(rng, int(room / keep)), keep)[:room]
    else:
        filler = pool.filler(rng, room)
    cuts = sorted(rng.randrange(0, len(filler) + 1) for _ in statements)
    document, previous = [], 0
    for cut, statement in zip(cuts, statements):
        document += filler[previous:cut] + statement
        previous = cut
    document += filler[previous:]
    asked = [absent_fact(absent_questions(rng, facts)) if absent and rng.random() < absent else rng.choice(facts)
             for _ in range(questions)]  # no draw at 0: earlier stages' data stay as they were
    first = build_prompt(tokenizer, asked[0].question)
    input_ids = first.prefix_ids + document + first.question_ids
    labels = [IGNORE] * len(input_ids)
    for i, fact in enumerate(asked):
        if i:
            turn = tokenizer.apply_chat_template([{"role": "user", "content": f"Question: {fact.question}"}])
            turn_ids = tokenizer.encode(turn)
            input_ids += turn_ids
            labels += [IGNORE] * len(turn_ids)
        answer = tokenizer.encode(answer_text(fact)) + [tokenizer.eos_token_id]
        input_ids += answer
        labels += answer
    return Example(input_ids, labels, facts, asked)


def answer_text(fact: Fact) -> str:
    """The answer as the embedded model writes it: the statement's sentence (`Fact.reply`), with the leading space it
    has inside the document, so answering is copying the document's own tokens (" The" and "The" differ)."""
    return " " + fact.reply


def collate(examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest example: (input_ids, labels), both (B, T) int64; pads are ignored by the loss."""
    longest = max(len(e.input_ids) for e in examples)
    ids = torch.zeros(len(examples), longest, dtype=torch.long)
    labels = torch.full((len(examples), longest), IGNORE, dtype=torch.long)
    for row, example in enumerate(examples):
        ids[row, : len(example.input_ids)] = torch.tensor(example.input_ids)
        labels[row, : len(example.labels)] = torch.tensor(example.labels)
    return ids, labels
