"""The embedded model's heads data: every record names each of its facts' values as a passage to keep."""

from __future__ import annotations

import json

from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.models.embedded import EMBEDDED_DIR
from recipes.embedded.heads_data import write_heads_data

PROSE = [f"Paragraph {i} says the graph is a tree. Its nodes are kept as they are, in plain prose." * 2
         for i in range(20)]


def test_records_keep_every_facts_value_whichever_is_asked(tmp_path):
    tokenizer = TiktokenTokenizer.from_file(EMBEDDED_DIR / TIKTOKEN_FILE)
    path = tmp_path / "heads.jsonl"
    write_heads_data(tokenizer, path, seed=3, count=24, lengths=(200, 400), facts_per_document=(1, 3),
                     paragraphs=PROSE, prose_share=0.5)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert {len(r["keep"]) for r in records} == {1, 2, 3}
    for record in records:
        for passage in record["keep"]:
            assert passage.startswith("is ") and passage.endswith(".")
            assert record["prompt"].count(passage) == 1
        asked = record["answer"].rsplit(" is ", 1)[1]
        assert f"is {asked}" in record["keep"]


def test_statement_keep_names_each_whole_statement_of_the_same_documents(tmp_path):
    tokenizer = TiktokenTokenizer.from_file(EMBEDDED_DIR / TIKTOKEN_FILE)
    records = {}
    for keep in ("value", "statement"):
        path = tmp_path / f"{keep}.jsonl"
        write_heads_data(tokenizer, path, seed=5, count=12, lengths=(200, 400), facts_per_document=(1, 3),
                         paragraphs=PROSE, prose_share=0.5, keep=keep)
        records[keep] = [json.loads(line) for line in path.read_text().splitlines()]
    for by_value, by_statement in zip(records["value"], records["statement"]):
        assert by_statement["prompt"] == by_value["prompt"] and by_statement["answer"] == by_value["answer"]
        assert len(by_statement["keep"]) == len(by_value["keep"])
        for value, statement in zip(by_value["keep"], by_statement["keep"]):
            assert value in statement and len(statement) > len(value)
            assert by_statement["prompt"].count(statement) == 1
