"""The kept-set oracle of the natural task: one bounded read that never drops the passage holding each question's
answer, in any layer or KV head, while the retaining heads choose the rest of the budget.

A question's passage is the `width` tokens centred on its answer's place (`baselines.answer_place`: its depth, the
later place of a two-place question); a not-stated question has none. One read serves every question asked of the
document, so all their passages are kept at once (about 256 tokens each): what better heads could reach on the
same reading model, if they kept the right text."""

from __future__ import annotations

from benchmarks.embedded.diagnose import StatementKeeper
from benchmarks.embedded.evaluate import reading_ids
from locret_cli.bench.baselines import answer_place, document_string
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.settings import ReadSettings

WIDTH = 256  # tokens kept around each answer's place


def passage_oracle(session, document, questions, settings: ReadSettings, width: int = WIDTH) -> StatementKeeper:
    """The oracle for one `document` asked `questions` (natural ones, with depths), read by `session` with
    `settings`: spans of the read's token indices kept whole, the heads' scores elsewhere."""
    tokenizer = session.loaded.tokenizer
    prefix = prompt_layout(tokenizer).head_ids
    total = len(reading_ids(tokenizer, prefix, document, settings.chunk_size))
    text = document_string(document)
    spans = []
    for question in questions:
        place = answer_place(question, text) if question.answer else None
        if place is None:
            continue
        at = len(prefix) + len(tokenizer.encode(text[:int(place * len(text))]))
        first = min(max(at - width // 2, len(prefix)), max(total - width, len(prefix)))
        spans.append((first, min(first + width, total)))
    return StatementKeeper(LocretPolicy(session.heads, settings.score_pool), spans)
