"""The model's own yes or no: does the text it read answer the question at all?

Asked on a fork of the engine that read the re-read windows, before it answers: the question, followed by
`ANSWERABLE`, is run through the model once, and the next token's logits are read as a choice between "yes" and
"no". `Checked` answers then refuse where that share of yes falls below `answerable_below` (`api/answer_checks.py`).
The cost is one forward of the question (about 60 tokens) over the cache already read; no second read.
"""

from __future__ import annotations

import functools

import torch

from locret_cli.core.engine import Engine

ANSWERABLE = "Does the text above answer this question? Reply only yes or no."
YES, NO = ("yes", "Yes", " yes", " Yes"), ("no", "No", " no", " No")


def with_answerable_check(question: str) -> str:
    """The question as the check asks it: the user's question, then `ANSWERABLE`."""
    return f"{question.strip()}\n\n{ANSWERABLE}"


@functools.lru_cache(maxsize=8)
def _single_token_ids(tokenizer, words: tuple[str, ...]) -> tuple[int, ...]:
    found = (tokenizer.encode(word, add_special_tokens=False) for word in words)
    return tuple(ids[0] for ids in found if len(ids) == 1)


def yes_share(tokenizer, logits: torch.Tensor) -> float:
    """P(yes) / (P(yes) + P(no)) from the next token's `logits` (vocab,), over the spellings of "yes" and "no"
    that are one token each in this tokenizer; 0.5 when it spells neither as one token."""
    yes, no = _single_token_ids(tokenizer, YES), _single_token_ids(tokenizer, NO)
    if not yes or not no:
        return 0.5
    margin = logits[list(yes)].float().logsumexp(0) - logits[list(no)].float().logsumexp(0)
    return float(torch.sigmoid(margin))


def answerable_share(engine: Engine, tokenizer, check_ids: list[int]) -> float:
    """How surely the model says the text `engine` has read answers the question (`check_ids`: the question with
    `ANSWERABLE`, in the chat layout), as `yes_share`; `engine` itself is left as it was."""
    return yes_share(tokenizer, engine.fork().forward(check_ids, score=False))
