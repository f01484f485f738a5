"""rank_statements' marks of where a statement's value sits: " is" and the tokens after it."""

from __future__ import annotations

from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.models.embedded import EMBEDDED_DIR
from research.embedded.rank_statements import after_is


def test_after_is_marks_is_and_the_four_tokens_after_it():
    tokenizer = TiktokenTokenizer.from_file(EMBEDDED_DIR / TIKTOKEN_FILE)
    is_id = tokenizer.encode(" is")
    other = tokenizer.encode(" harbour")[:1]
    assert len(is_id) == 1 and other != is_id
    ids = other * 3 + is_id + other * 6 + is_id + other * 2
    assert after_is(tokenizer, ids).tolist() == [False] * 3 + [True] * 5 + [False] * 2 + [True] * 3
    assert after_is(tokenizer, ids, reach=1).tolist() == [False] * 3 + [True] * 2 + [False] * 5 + [True] * 2 + [False]
