"""The SmolLM2 heads' data: prose filtering, facts placed at their depths, records whose answer states every fact."""

from __future__ import annotations

import json
import random

from recipes import prose
from recipes.smollm2 import documents, heads_data, reader_data

PROSE = [f"Paragraph {i} explains how the graph keeps its nodes. It is plain prose, with two sentences." * 2
         for i in range(40)]


def test_prose_keeps_sentences_and_drops_code_tables_and_fields():
    text = "The function returns a new graph. Each node keeps its attributes, and edges are copied as they are."
    assert prose.is_prose(text * 2)
    for bad in (">>> G = nx.Graph()\n" + text, "x_value is the input. " + text, "Parameters\n----------\n" + text,
                "    indented code line\n" + text, "short. text."):
        assert not prose.is_prose(bad), bad
    assert prose.clean("Use :func:`~networkx.path` and ``G.nodes``\nnow.") == "Use networkx.path and G.nodes now."


def test_facts_sit_at_their_depths_and_their_answers_are_stated():
    facts = documents.facts_for(random.Random(3), 4)
    assert [f.kind for f in facts] == ["passkey", "code", "person", "code"]
    document = documents.build(PROSE, 2000, facts, seed=7)
    assert document.depths == sorted(document.depths) and len(document.depths) == 4
    for fact, depth in zip(document.facts, document.depths):
        at = document.text.index(fact.statement) / len(document.text)
        assert abs(at - depth) < 0.1 and fact.answer in fact.statement
    assert documents.build(PROSE, 2000, facts, seed=7).text == document.text  # seeded


def test_records_ask_for_every_fact_they_hold(tmp_path):
    path = heads_data.write(PROSE, tmp_path / "train.jsonl", examples=30, tokens=400, seed=0)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 30
    for record in records:
        stated = [s for s in record["answer"].split(". ") if s]
        assert record["prompt"].count("\n\nQuestion: ") == 1 and len(stated) in (1, 2, 3)
        for sentence in stated:  # every fact the answer states is in the prompt, and asked
            assert sentence.rstrip(".") in record["prompt"]
        assert len(record["keep"]) == len(stated) and all(k in record["prompt"] for k in record["keep"])


def test_reader_records_ask_every_fact_of_their_document_with_the_sentence_that_answers(tmp_path):
    path = reader_data.write(PROSE, tmp_path / "reader.jsonl", [reader_data.Batch(12, (300, 900))], seed=0)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 12 and {3, 4, 5, 6} >= {len(r["questions"]) for r in records}
    for record in records:
        for item in record["questions"]:
            assert item["answer"].rstrip(".") in record["document"] and item["question"].endswith("?")


def test_batches_add_crowded_and_budgeted_records_and_leave_the_earlier_ones_as_they_were(tmp_path):
    facts = documents.facts_for(random.Random(4), 9, passkey=False, crowded=True)
    attributes = {f.question.split(" of the ")[0] for f in facts}
    assert len(attributes) == 2 and len({f.question for f in facts}) == 9  # one code, one role; nine places
    plain = reader_data.Batch(5, (300, 900))
    first = reader_data.write(PROSE, tmp_path / "plain.jsonl", [plain], seed=0)
    batches = [plain, reader_data.Batch(3, (300, 900), (8, 12), crowded=True),
               reader_data.Batch(2, (1000, 2000), (8, 12), budget=256)]
    lines = reader_data.write(PROSE, tmp_path / "all.jsonl", batches, seed=0).read_text().splitlines()
    assert lines[:5] == first.read_text().splitlines() and len(lines) == 10
    records = [json.loads(line) for line in lines]
    for record in records[5:8]:
        questions = [q["question"] for q in record["questions"]]
        assert 8 <= len(questions) <= 12 and "budget" not in record
        assert len({q.split(" of the ")[0] for q in questions if "pass key" not in q}) == 2
    assert [r.get("budget") for r in records] == [None] * 8 + [256, 256]
    assert all(len(r["document"]) > len(records[0]["document"]) for r in records[8:])


def test_the_value_of_a_reply_is_its_last_words_after_is():
    fact = documents.make_fact("passkey", random.Random(0), "north depot")
    assert heads_data.replied_value(heads_data.reply(fact)) == fact.answer
    assert heads_data.replied_value("The pass key is 25992.") == "25992"
    assert heads_data.replied_value("The chief engineer of the pine lodge is Marta Quinn.") == "Marta Quinn"
