"""Questions that cannot be answered are refused in one line, before the work they would waste: a blank question
before the model loads, a question longer than the model's positions before the document is read, and a long
question's prefill planned into the memory check."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from locret_cli.api.plan import QUESTION_ALLOWANCE
from locret_cli.api.session import Session
from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import text_document

runner = CliRunner()
DOCUMENT = "The gate code of the north depot is 4821. " + "The weather was mild that year. " * 40
LONG = "What is the gate code of the north depot? " * 3000  # 30,000 tokens, where the embedded model has 2,048


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    return path


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("args", [[""], ["   "], ["-Q", "What?", "-Q", "\t"]])
def test_a_blank_question_is_refused_before_the_model_loads(monkeypatch, document, args):
    def no_model(*_, **__):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("locret_cli.api.load_session", no_model)
    result = runner.invoke(app, ["ask", str(document), *args])
    assert result.exit_code == 1, result.output
    assert error_lines(result) == ["error: the question is empty"]
    assert document.read_text() == DOCUMENT


def test_a_question_past_the_positions_is_refused_before_the_document_is_read(monkeypatch, document):
    def no_read(*_, **__):
        raise AssertionError("the document was read")

    monkeypatch.setattr(Session, "read", no_read)
    result = runner.invoke(app, ["ask", str(document), LONG])
    assert result.exit_code == 1, result.output
    assert error_lines(result) == [
        'error: the question "What is the gate code of the north depot..." takes 30,008 tokens: with '
        "--max-new-tokens 48 answer tokens it passes the 2,048 positions this model was trained on; shorten the "
        "question"]
    assert document.read_text() == DOCUMENT


def test_the_positions_count_the_kept_cache_only_under_compact_eviction(embedded_session):
    question = "What is the gate code? " * 170  # 1,028 tokens: fits alone, not after 1,024 kept entries
    plan = embedded_session.plan(questions=[question])  # the plan knows no document yet: the question alone fits
    assert plan.question_tokens == 1028
    long_document = DOCUMENT + "The harbour was quiet in the evening. " * 300  # 2,000 tokens and more
    reading = embedded_session.read(text_document(long_document, "doc"), plan)
    with pytest.raises(LocretError, match=r'^the question "What is the gate code\? What is the gate[.][.][.]" '
                                          r"takes 1,028 tokens: with 1,024 kept entries and max_new_tokens 48 answer "
                                          r"tokens it passes the 2,048 positions this model was trained on; shorten "
                                          r"the question$"):
        reading.ask(question)
    short = embedded_session.read(text_document(DOCUMENT, "doc"), plan)  # fewer entries than the budget: it fits
    assert short.ask(question).answer is not None
    original_positions = embedded_session.plan({"positions": "original"})
    original = embedded_session.read(text_document(long_document, "doc"), original_positions)
    assert original.ask(question).answer is not None  # past the positions already: the question alone must fit
    past = embedded_session.read(text_document(long_document * 2, "doc"), embedded_session.plan({"budget": 3000}))
    assert past.ask(question).answer is not None  # a budget past the positions: the question alone must fit


def test_a_long_question_asked_of_a_reading_is_refused_in_one_line(embedded_session):
    reading = embedded_session.read(text_document(DOCUMENT, "doc"))
    with pytest.raises(LocretError) as refused:
        reading.ask(LONG)
    assert "passes the 2,048 positions" in str(refused.value) and "\n" not in str(refused.value)
    answer = reading.ask("What is the gate code of the north depot?").answer
    assert answer == "The gate code of the north depot is 4821."


def test_the_memory_plan_counts_the_longest_question(monkeypatch, embedded_session):
    question = "What is the gate code of the north depot? " * 60  # longer than a chunk of 512 and the allowance
    plan = embedded_session.plan(questions=["Short?", question])
    assert plan.question_tokens == 608 and 608 > plan.read.chunk_size and 608 > QUESTION_ALLOWANCE
    estimated = []
    monkeypatch.setattr(Session, "check_memory", lambda self, plan, document:
                        estimated.append((plan.cache_entries(), plan.question_room)))
    embedded_session.read(text_document(DOCUMENT, "doc"), plan)
    room = plan.read.budget + plan.read.chunk_size + plan.question_tokens + plan.answer.max_new_tokens
    assert estimated == [(room, plan.question_tokens)]


def test_a_long_questions_prefill_that_would_not_fit_is_refused(monkeypatch, embedded_session):
    reading = embedded_session.read(text_document(DOCUMENT, "doc"))
    monkeypatch.setattr("locret_cli.core.measure.available_memory", lambda device: 1 << 20)
    question = "What is the gate code of the north depot? " * 60
    with pytest.raises(LocretError, match=r"^the question takes 608 tokens, whose prefill needs about [\d.]+ MiB but "
                                          r"only 1\.00 MiB is free; shorten the question$"):
        reading.ask(question)
    assert reading.ask("What is the gate code of the north depot?").answer  # a short one is not planned again
