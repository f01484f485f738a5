"""The fact-kept oracles: eviction that never drops a fact's sentence, in any layer or KV head.

What the rest of the budget holds is the oracle's second half:

    fact+heads    the retaining heads' choice, as locret reads (the ceiling for better heads on the same reader)
    fact+recent   the most recent text, a run a small model reads as prose (the ceiling for keeping runs)

The facts' sentences are found as token indices of the read the way `benchmarks/embedded/evaluate.py` finds them."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.embedded.diagnose import StatementKeeper
from benchmarks.embedded.evaluate import reading_ids, spans_in
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.policies.streaming import StreamingPolicy
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.settings import ReadSettings

ORACLES = ("fact+heads", "fact+recent")


def fact_oracle(oracle: str, session, document, statements: list[str], settings: ReadSettings) -> StatementKeeper:
    """The `oracle` (one of ORACLES) for one `document` with facts stated as `statements`, read by `session` with
    `settings`."""
    tokenizer, model = session.loaded.tokenizer, session.loaded.model
    prefix = prompt_layout(tokenizer).head_ids
    ids = reading_ids(tokenizer, prefix, document, settings.chunk_size)
    spans = spans_in(tokenizer, ids, [SimpleNamespace(statement=s) for s in statements])
    if oracle == "fact+heads":
        rest = LocretPolicy(session.heads, settings.score_pool)
    else:
        rest = StreamingPolicy(model.config.num_key_value_heads)
    return StatementKeeper(rest, spans)
