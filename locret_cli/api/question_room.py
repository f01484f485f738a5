"""What a question may take: its tokens within the positions the model was trained on, and its prefill within free
memory.

A question is prefilled in one pass after the kept cache. Under an evicting policy with compact positions the kept
entries are numbered from 0, so they, the question and the answer must fit in the model's positions; a read that
keeps every entry (or their original positions) already runs past them on a long document and is warned about
(`session.past_positions`), and a budget above the positions runs past them too, so there the question and its
answer alone must fit. A run's plan refuses a question
that cannot fit even alone, before the document is read; each answer checks the rest, before its bounded read if
that is still pending.
"""

from __future__ import annotations

import json

from locret_cli.api.plan import QUESTION_ALLOWANCE
from locret_cli.core.measure import plan_memory
from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.settings import AnswerSettings
from locret_cli.units import human_bytes

SHOWN_CHARS = 40  # of a refused question, quoted in its error


def trained_positions(model) -> int | None:
    """The positions `model` was trained on (its config's `max_position_embeddings`), if it says."""
    return getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)


def question_tokens(tokenizer, question: str) -> int:
    """The tokens `question` takes after the document, its chat layout included."""
    return len(conversation_ids(tokenizer, (), question))


def check_positions(model, answering: AnswerSettings, tokens: int, question: str, kept: int = 0) -> None:
    """Refuse, in one line, a `question` of `tokens` that cannot fit in the model's positions after `kept` entries
    numbered from 0, with its answer (module docstring)."""
    trained = trained_positions(model)
    if trained is None:
        return
    kept = kept if kept < trained else 0  # a budget past the positions is the read's own choice: not the question's
    if kept + tokens + answering.max_new_tokens <= trained:
        return
    shown = question if len(question) <= SHOWN_CHARS else question[:SHOWN_CHARS].rstrip() + "..."
    raise SettingError("the question {question} takes {tokens} tokens: with " +
                       ("{kept} kept entries and " if kept else "") +
                       "{max_new_tokens} {answer} answer tokens it passes the {trained} positions this model was "
                       "trained on; shorten the question", question=json.dumps(shown, ensure_ascii=False),
                       tokens=f"{tokens:,}", kept=f"{kept:,}", answer=f"{answering.max_new_tokens:,}",
                       trained=f"{trained:,}")


def check_prefill_fits(model, cached: int, tokens: int, answering: AnswerSettings, kv_bits: int) -> None:
    """Refuse, in one line, a question longer than a read plans for (`QUESTION_ALLOWANCE`) whose one-pass prefill
    after `cached` entries is estimated not to fit in free memory (`measure.plan_memory`)."""
    if tokens <= QUESTION_ALLOWANCE:
        return
    plan = plan_memory(model, cached + tokens + answering.max_new_tokens, tokens, kv_bits=kv_bits)
    if plan.need_bytes > plan.available_bytes:
        raise LocretError(f"the question takes {tokens:,} tokens, whose prefill needs about "
                          f"{human_bytes(plan.need_bytes)} but only {human_bytes(plan.available_bytes)} is free; "
                          "shorten the question")
