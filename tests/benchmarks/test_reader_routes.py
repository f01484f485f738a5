"""reader_routes reads each document once: the natural task's two halves share one read of each document."""

from __future__ import annotations

import json

import pytest

from benchmarks.reader_routes import reads
from locret_cli.bench import natural
from locret_cli.errors import SettingError


def test_the_natural_halves_share_one_read_of_each_document():
    try:
        test, validation = natural.load("test")[:2], natural.load("validation")[:2]
    except SettingError as exc:
        pytest.skip(f"a source of the natural documents is not installed as written against: {exc}")
    grouped = reads(None, ["natural", "natural-validation"], 0, 2, None)
    assert [index for index, *_ in grouped] == [0, 1]
    for (index, document, statements, asked), t, v in zip(grouped, test, validation, strict=True):
        assert document.name == t.name == v.name and statements == []
        assert [q.question for q in asked["natural"]] == [q.question for q in t.questions]
        assert [q.question for q in asked["natural-validation"]] == [q.question for q in v.questions]
    assert [sorted(asked) for *_, asked in reads(None, ["natural"], 0, 2, None)] == [["natural"], ["natural"]]
    only = reads(None, ["natural", "natural-validation"], 0, 2, None, only={test[1].name})
    assert [(index, document.name) for index, document, *_ in only] == [(1, test[1].name)]


def test_each_answer_is_reported_as_said_and_as_strict_shows_it(tmp_path):
    from benchmarks.reader_routes import read_rows

    row = {"set": "natural", "length": 0, "policy": "locret", "document": 0, "config": "windows", "kind": "lookup",
           "answer": "It is 9917.", "verdict": "made_up", "strict_answer": "The document does not say.",
           "strict_verdict": "none"}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "config": "one-read", "verdict": "right"}) + "\n")
    rows = read_rows(path)
    assert [(r["config"], r["answer"], r["correct"]) for r in rows] == [
        ("windows", "It is 9917.", False), ("one-read", "It is 9917.", True),
        ("windows+strict", "The document does not say.", False),
        ("one-read+strict", "The document does not say.", False)]
    refusing = {**row, "refuse_answer": "The document does not say.", "refuse_verdict": "none"}
    path.write_text(json.dumps(refusing) + "\n")
    assert [(r["config"], r["answer"]) for r in read_rows(path)] == [
        ("windows", "It is 9917."), ("windows+strict", "The document does not say."),
        ("windows+refuse", "The document does not say.")]


def test_the_kept_set_oracle_keeps_the_tokens_around_each_stated_answer():
    from benchmarks.embedded.evaluate import reading_ids
    from benchmarks.smollm2.passage_oracle import passage_oracle
    from locret_cli.api import load_session
    from locret_cli.bench.tasks import Question
    from locret_cli.inputs.documents import text_document
    from locret_cli.inputs.prompt import prompt_layout
    from locret_cli.settings import ReadSettings

    session = load_session(device="cpu")
    text = "The mill grinds wheat by the river. " * 60 + "The gate code of the north depot is 4821. " + \
        "The road bends east. " * 60
    document = text_document(text, "doc")
    stated = Question("What is the gate code of the north depot?", "4821",
                      depth=(text.index("4821") + 2) / len(text))
    unstated = Question("What is the gate code of the south depot?", "")
    settings = ReadSettings(budget=256, chunk_size=128)
    keeper = passage_oracle(session, document, [stated, unstated], settings, width=32)
    tokenizer = session.loaded.tokenizer
    ids = reading_ids(tokenizer, prompt_layout(tokenizer).head_ids, document, settings.chunk_size)
    assert len(keeper.spans) == 1
    first, last = keeper.spans[0]
    assert last - first == 32 and "4821" in tokenizer.decode(ids[first:last])


def routes_rows(tmp_path, monkeypatch, configs: list[str]) -> list[dict]:
    """reader_routes' rows for `configs`, asked of one document of the embedded model's kind, one lookup question."""
    import benchmarks.reader_routes as routes
    from locret_cli.api import load_session
    from locret_cli.bench.tasks import Question
    from locret_cli.inputs.documents import text_document

    text = "The mill grinds wheat by the river. " * 40 + "The gate code of the north depot is 4821. " + \
        "The road bends east. " * 40
    asked = [Question("What is the gate code of the north depot?", "4821", kind="lookup")]
    monkeypatch.setattr(routes, "reads", lambda *args: [(0, text_document(text, "doc"), [], {"natural": asked})])
    out = tmp_path / "rows.jsonl"
    routes.run(load_session(device="cpu"), "locret", ["natural"], [0], 1, out, None,
               {"budget": 256, "chunk_size": 128}, configs)
    return routes.read_rows(out)


def test_a_read_is_asked_every_configuration_and_recorded_three_ways(tmp_path, monkeypatch):
    rows = routes_rows(tmp_path, monkeypatch, ["one-read", "windows", "attention-route"])
    assert sorted(r["config"] for r in rows) == ["attention-route", "attention-route+refuse", "attention-route+strict",
                                                  "attention-route+wrefuse", "one-read", "one-read+refuse",
                                                  "one-read+strict", "windows", "windows+refuse", "windows+strict"]
    said = {r["config"]: r for r in rows}
    assert said["attention-route"]["route"] == "windows"  # the window attention placed was read again
    for config in ("one-read", "windows", "attention-route"):
        assert said[config]["refuse_answer"] in (said[config]["answer"], "The document does not say.")
        assert said[config + "+refuse"]["answer"] == said[config]["refuse_answer"]


def test_bm25_configurations_answer_from_windows_with_the_read_left_pending(tmp_path, monkeypatch):
    rows = {r["config"]: r for r in routes_rows(tmp_path, monkeypatch, ["bm25-route", "bm25-3x1024"])}
    assert {"bm25-route", "bm25-route+wrefuse", "bm25-3x1024", "bm25-3x1024+refuse"} <= set(rows)
    assert [(r["route"], r["holds_document"]) for r in rows.values()] == [("windows", False)] * len(rows)


def test_the_windows_refusal_withholds_an_answer_whose_words_the_windows_lack():
    from types import SimpleNamespace

    from benchmarks.reader_routes import answer_views
    from locret_cli.bench.tasks import Question
    from locret_cli.checks.grounding import REFUSAL, DocumentText, ground

    document = DocumentText(["The gate code of the north depot is 4821. The south depot's code is 7730."], ["p. 1"])
    question = Question("What is the gate code of the north depot?", "4821", kind="lookup")
    window = DocumentText(["The gate code of the north depot is 4821.", question.question], ["p. 1", "the question"])
    for answer, withheld in (("4821", False), ("7730", True)):
        verdict = ground(question.question, answer, document)
        result = SimpleNamespace(answer=answer, grounding=SimpleNamespace(withheld=None, verdict=verdict))
        views = answer_views(question, result, document, window)
        assert views["refuse_answer"] == answer  # the document holds both numbers
        assert views["wrefuse_answer"] == (REFUSAL if withheld else answer)
