"""How an answer is made: the route the answer's settings choose (`api/routes.py`), named in `--json` and the cost
table, and the one check after every route (`api/answer_checks.py`), which restates a fixed-form answer in the
question's words only when that makes a wrong-worded right value grounded."""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace

import pytest
from helpers.pending_reads import LOCATED, SETTINGS, UNLOCATED, WORDS
from rich.console import Console

from locret_cli.api import load_session
from locret_cli.api.answer_checks import check_answer
from locret_cli.api.routes import BoundedCache, LocatedWindows, route_for
from locret_cli.checks.grounding import REFUSAL
from locret_cli.models.embedded import restated
from locret_cli.settings import AnswerSettings

GATE = "What is the gate code of the north depot?"
FACT = "The gate code of the north depot is 4821."


def test_the_answer_settings_choose_the_route():
    assert isinstance(route_for(AnswerSettings()), BoundedCache)
    assert isinstance(route_for(AnswerSettings(reread=1)), LocatedWindows)
    assert (BoundedCache.name, LocatedWindows.name) == ("bounded-cache", "windows")


def test_json_and_the_cost_table_name_the_route_that_answered(session_and_path):
    from locret_cli.cli.report import cost_table

    session, path = session_and_path
    reading = session.read(path, SETTINGS)
    located, unlocated = reading.ask(LOCATED, WORDS), reading.ask(UNLOCATED, WORDS)
    plain = reading.ask(LOCATED, replace(WORDS, reread=0))
    assert [r.route for r in (located, unlocated, plain)] == ["windows", "bounded-cache", "bounded-cache"]
    assert located.to_json()["route"] == "windows" and located.to_json()["windows"]
    assert unlocated.to_json()["windows"] is None and plain.to_json()["reread"] == 0

    def row(result) -> str:
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(cost_table(result))
        return next(line for line in console.export_text().splitlines() if "answered from" in line)

    assert "re-read windows" in row(located)
    assert "the bounded cache (no window located)" in row(unlocated)
    assert "the bounded cache" in row(plain) and "no window" not in row(plain)


def test_restating_takes_the_question_s_words_around_the_value():
    assert restated(GATE, "The gate codes north depot is 4821.") == FACT
    assert restated("What is the pass key?", "The pass keyy is 52.") == "The pass key is 52."
    assert restated(GATE, "The gate code of the north depot is not stated.") is None
    assert restated(GATE, "4821") is None and restated(GATE, "It is .") is None
    assert restated("Who signed it?", "Ashby is 4821.") is None  # not of the model's form


@pytest.fixture(scope="module")
def embedded_reading(tmp_path_factory):
    path = tmp_path_factory.mktemp("doc") / "doc.txt"
    path.write_text("The mill grinds wheat by the river. " * 20 + FACT + " The road bends east. " * 20)
    return load_session(device="cpu").read(str(path))


def drafted(reading, answer: str, strict: bool = True):
    ids = reading.tokenizer.encode(answer, add_special_tokens=False)
    answering = AnswerSettings(max_new_tokens=48, strict=strict)
    return SimpleNamespace(generation=SimpleNamespace(token_ids=ids), engine=SimpleNamespace(answering=answering),
                           sources=None, answerable=None)


@pytest.mark.parametrize("said, shown, restated_from, withheld", [
    (FACT, FACT, None, None),  # grounded as said: left as it is
    ("The gate codes north depot is 4821.", FACT, "The gate codes north depot is 4821.", None),  # value found
    ("The gate codes north depot is 4822.", REFUSAL, None, "The gate codes north depot is 4822."),  # value not found
])
def test_a_garbled_fixed_form_answer_is_restated_only_when_its_value_is_in_the_document(
        embedded_reading, said, shown, restated_from, withheld):
    checked = check_answer(embedded_reading.view(), GATE, drafted(embedded_reading, said), sources=0)
    assert (checked.answer, checked.restated_from, checked.withheld) == (shown, restated_from, withheld)
    assert checked.grounding.grounded == (withheld is None)


def test_a_model_without_fixed_forms_is_never_restated(embedded_reading):
    general = replace(embedded_reading, question_forms=None)
    checked = check_answer(general.view(), GATE, drafted(general, "The gate codes north depot is 4821.", strict=False),
                           sources=0)
    assert checked.answer == "The gate codes north depot is 4821." and checked.restated_from is None
    assert not checked.grounding.grounded


@pytest.mark.parametrize("fallback, windows_level, cache_level, asks_cache, shown", [
    ("unspecific", 0, 1, True, "bounded-cache"), ("unspecific", 0, 0, True, "windows"),
    ("unspecific", 1, 2, False, "windows"), ("unstated", 1, 2, True, "bounded-cache"),
    ("unstated", 1, 1, True, "windows"), ("unstated", 0, 1, True, "bounded-cache"),
    ("unstated", 2, 2, False, "windows")])
def test_the_bounded_cache_answers_too_where_the_windows_answer_holds_up_less_than_the_fallback_asks(
        session_and_path, monkeypatch, fallback, windows_level, cache_level, asks_cache, shown):
    from locret_cli.api import routes

    session, path = session_and_path
    checked = []

    def holds(document, question, drafted):  # 0: names nothing the document holds; 1: holds it; 2: states it
        checked.append(drafted.route)
        return windows_level if drafted.route == "windows" else cache_level

    monkeypatch.setattr(routes, "how_document_holds", holds)
    reading, heard = session.read(path, SETTINGS, defer=True), []
    windows_only = reading.ask(LOCATED, WORDS)
    assert windows_only.route == "windows" and reading.pending is not None and checked == []
    result = reading.ask(LOCATED, replace(WORDS, fallback=fallback), on_token=heard.append)
    assert checked == (["windows", "bounded-cache"] if asks_cache else ["windows"])
    assert (reading.pending is None) == asks_cache  # the bounded read runs only when its cache is asked
    assert result.route == shown and result.windows
    plain = reading.ask(LOCATED, replace(WORDS, reread=0))
    expected = plain.answer if shown == "bounded-cache" else windows_only.answer
    assert result.answer == expected
    assert reading.tokenizer.decode(heard, skip_special_tokens=True).strip() == expected


@pytest.mark.parametrize("said, shown", [
    ("The gate code of the north depot is 9917.", REFUSAL),  # 9917 occurs nowhere: made up, refused
    ("The gate code of the north depot is wheat.", "The gate code of the north depot is wheat."),  # held elsewhere
    (FACT, FACT)])
def test_refuse_unfound_withholds_only_content_from_nowhere(embedded_reading, said, shown):
    general = replace(embedded_reading, question_forms=None)
    draft = drafted(general, said, strict=False)
    draft.engine.answering = replace(draft.engine.answering, refuse_unfound=True)
    checked = check_answer(general.view(), GATE, draft, sources=0)
    assert checked.answer == shown and checked.withheld == (said if shown == REFUSAL else None)
    strict = check_answer(general.view(), GATE, drafted(general, said), sources=0)
    assert strict.answer == (FACT if said == FACT else REFUSAL)  # --strict also withholds the neighbour's word


@pytest.mark.parametrize("said, route, past, shown", [
    ("The gate code of the north depot is wheat.", "windows", "wheat", REFUSAL),  # held elsewhere, not in the window
    ("The gate code of the north depot is wheat.", "bounded-cache", "wheat",
     "The gate code of the north depot is wheat."),  # from the bounded cache: looked for in the whole document
    (FACT, "windows", "wheat", FACT),
    (FACT, "windows", "depot", FACT)])  # the window holds "is 4821."; the question gives the rest
def test_refuse_unfound_in_read_looks_only_in_the_windows_an_answer_read_and_the_question(embedded_reading, said,
                                                                                          route, past, shown):
    from locret_cli.core.answer.reread import Window

    general = replace(embedded_reading, question_forms=None)
    ids, decode = general.input_ids.tolist(), general.tokenizer.decode
    first = next(i for i in range(len(ids)) if past not in decode(ids[i:]))  # the window starts after `past`
    window = Window(first, min(first + 40, len(ids)), "lines 1-1")
    read = decode(ids[window.first:window.end])
    assert "4821" in read and "wheat" not in read and ("depot" not in read) == (past == "depot")
    draft = drafted(general, said, strict=False)
    draft.engine.answering = replace(draft.engine.answering, refuse_unfound=True, unfound_in="read")
    draft.route, draft.windows = route, [window]
    checked = check_answer(general.view(), GATE, draft, sources=0)
    assert checked.answer == shown and checked.withheld == (said if shown == REFUSAL else None)
    draft.engine.answering = replace(draft.engine.answering, unfound_in="document")
    assert check_answer(general.view(), GATE, draft, sources=0).answer == said  # the document holds every word
