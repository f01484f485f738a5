"""A conversation about one read document: each turn is answered over its cache plus the turns before it.

The earlier turns are prefilled after the document for every new question, newest kept: when they would take more
than `history_tokens`, the oldest are dropped first. The document's cache is never changed, so a stopped or failed
turn leaves the conversation as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from locret_cli.api.answer import AskResult
from locret_cli.api.plan import HISTORY_TOKENS
from locret_cli.api.reading import Reading
from locret_cli.core.engine import Progress
from locret_cli.files import refuse_existing, replacing, write_synced
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.settings import AnswerSettings

SOURCES_KEPT = 10  # per turn: the chat shows the best three, /sources all of them


@dataclass
class Conversation:
    reading: Reading
    history_tokens: int = HISTORY_TOKENS
    answering: AnswerSettings | None = None  # None: the reading's own
    sources: int = SOURCES_KEPT
    results: list[AskResult] = field(default_factory=list)  # every answered turn, oldest first

    def window(self, question: str) -> list[tuple[str, str]]:
        """The most recent turns, (question, answer), whose tokens before `question` fit in `history_tokens`."""
        turns = [(r.question, r.answer) for r in self.results]
        alone = len(conversation_ids(self.reading.tokenizer, [], question))
        while turns and len(conversation_ids(self.reading.tokenizer, turns, question)) - alone > self.history_tokens:
            turns.pop(0)
        return turns

    def ask(self, question: str, on_token: Callable[[int], None] | None = None,
            on_read: Callable[[Progress], None] | None = None) -> AskResult:
        """Answer `question` after the turns that fit; the turn joins the history once it is complete. A bounded
        read left pending runs first if the answer needs it, reporting to `on_read`."""
        result = self.reading.ask(question, self.answering, self.sources, on_token, history=self.window(question),
                                  on_read=on_read)
        self.results.append(result)
        return result

    def save_transcript(self, path: str, force: bool = False) -> None:
        """Write every turn as JSONL (question, answer, sources); refuses an existing file unless `force`."""
        target = refuse_existing(path, force or None)
        lines = [json.dumps({"question": r.question, "answer": r.answer,
                             "sources": None if r.sources is None else [s.to_json() for s in r.sources]})
                 for r in self.results]
        with replacing(target) as temporary:  # whole or not at all
            write_synced(temporary, lambda f: f.write("".join(line + "\n" for line in lines)))
