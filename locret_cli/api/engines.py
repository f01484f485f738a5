"""`build_engine`: the one place the api makes an `Engine`, from a run's plan.

A read (`Session.read`) and a saved context (`saved_context.load_reading`) each build their engine here; the windows
an answer reads again get theirs from the reading's engine (`Engine.over_text`). Everything an engine is made from
is the plan's: the read and answer settings, the policy named among the read settings, the prompt's tokens, and the
entries the cache holds at most (`Plan.cache_entries`), reserved up front.
"""

from __future__ import annotations

from collections.abc import Sequence

from locret_cli.api.plan import Plan
from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.core.engine import Engine
from locret_cli.core.policies import Policy


def build_engine(model, plan: Plan, policy: Policy, reader: ReaderAdapter | None = None,
                 question_ids: Sequence[int] = ()) -> Engine:
    """An engine for `model` that reads and answers as `plan` says, with `policy` (built for the plan's, or an
    evaluation's oracle in its place), `reader` in force for answers, and `question_ids` read after every chunk by a
    policy that reads with its questions."""
    room = (plan.cache_entries() or 0) if policy.evicts else 0  # a full cache grows as entries come
    return Engine(model, policy, plan.read, plan.prompt, plan.answer, room=room, question_ids=question_ids,
                  reader=reader)
