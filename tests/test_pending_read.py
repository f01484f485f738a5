"""A bounded read left pending: answers located by the question's words come from re-read windows alone, so the
read runs only when an answer needs the cache, and then gives the cache an eager read gives."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
import torch
from helpers.cli import ask
from helpers.pending_reads import LOCATED, SETTINGS, TEXT, UNLOCATED, WORDS

from locret_cli.api import Session
from locret_cli.api.saved_context import save_reading
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import open_document, token_chunks
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.inputs.sources import SourceMap


def keys(reading) -> list[torch.Tensor]:
    return [layer.keys.clone() for layer in reading.engine.cache.layers]


def test_an_answer_from_a_located_window_never_runs_the_read(session_and_path):
    session, path = session_and_path
    eager = session.read(path, SETTINGS)
    deferred = session.read(path, SETTINGS, defer=True)
    assert deferred.pending is not None and deferred.engine.document_tokens == 0
    assert torch.equal(deferred.input_ids, eager.input_ids) and deferred.document.tokens == eager.document.tokens
    result, expected = deferred.ask(LOCATED, WORDS), eager.ask(LOCATED, WORDS)
    assert result.windows and [(w.first, w.end) for w in result.windows] == [(w.first, w.end) for w in expected.windows]
    assert result.answer == expected.answer and result.sources == expected.sources
    assert deferred.pending is not None and deferred.engine.cache.length() == 0
    assert not result.kv_cache.holds_document and result.kv_cache.kept_tokens == 0 and expected.kv_cache.holds_document
    assert result.kv_cache.full_cache_bytes == expected.kv_cache.full_cache_bytes


def test_a_question_naming_no_window_runs_the_read_once_and_gets_the_eager_cache(session_and_path):
    session, path = session_and_path
    eager = session.read(path, SETTINGS)
    deferred = session.read(path, SETTINGS, defer=True)
    events = []
    assert deferred.ask(LOCATED, WORDS, on_read=events.append).route == "windows" and not events
    assert deferred.pending is not None
    result = deferred.ask(UNLOCATED, WORDS, on_read=events.append)
    assert result.route == "bounded-cache" and events and all(e.reading for e in events)
    assert result.windows is None and result.kv_cache.holds_document and deferred.pending is None
    assert result.answer == eager.ask(UNLOCATED, WORDS).answer
    assert result.kv_cache.kept_tokens == eager.engine.kept_tokens == SETTINGS.budget
    assert all(torch.equal(a, b) for a, b in zip(keys(deferred), keys(eager)))
    assert deferred.read_s == deferred.document.read_s == result.speed.read_s > 0
    read_events = len(events)
    deferred.ask(UNLOCATED, WORDS, on_read=events.append)
    assert len(events) == read_events  # nothing left to read
    assert deferred.engine.document_tokens == eager.engine.document_tokens  # read once


def test_read_now_reports_progress_and_a_read_stopped_part_way_is_refused_after(session_and_path):
    session, path = session_and_path
    deferred = session.read(path, SETTINGS, defer=True)
    events = []
    deferred.read_now(events.append)
    assert events[-1].tokens == len(deferred.input_ids) and events[-1].cache_tokens == SETTINGS.budget
    assert all(e.reading and e.unit == "bytes" and e.units_total == len(TEXT.encode()) for e in events)
    deferred.read_now(events.append)
    assert len(events) == -(-len(deferred.input_ids) // SETTINGS.chunk_size)  # the second call read nothing
    stopped = session.read(path, SETTINGS, defer=True)

    def stop(event):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stopped.read_now(stop)
    with pytest.raises(LocretError, match="stopped part-way"):
        stopped.ask(UNLOCATED, WORDS)
    assert stopped.ask(LOCATED, WORDS).windows  # answers from windows never needed the cache


def test_answer_settings_that_need_the_cache_run_the_read_first(session_and_path):
    session, path = session_and_path
    for answering in (replace(WORDS, reread=0), replace(WORDS, locate="both")):
        deferred = session.read(path, SETTINGS, defer=True)
        result = deferred.ask(LOCATED, answering)
        assert deferred.pending is None and result.kv_cache.holds_document
        assert result.kv_cache.kept_tokens == SETTINGS.budget


def test_tokenizing_reports_progress_and_the_chunks_come_back_unchanged(session_and_path):
    session, path = session_and_path
    events = []
    deferred = session.read(path, SETTINGS, defer=True, on_progress=events.append)
    assert [(e.cache_tokens, e.reading) for e in events] == [(0, False)] * len(events)
    assert events[-1].tokens == len(deferred.input_ids)
    prefix = prompt_layout(session.loaded.tokenizer).head_ids
    expected = list(token_chunks(open_document(path), session.loaded.tokenizer, SETTINGS.chunk_size, prefix,
                                 SourceMap("lines")))
    assert list(deferred.pending.chunks(deferred.input_ids)) == expected


def test_saving_or_mapping_a_deferred_reading_reads_it_first(session_and_path, tmp_path):
    session, path = session_and_path
    eager = session.read(path, SETTINGS)
    deferred = session.read(path, SETTINGS, defer=True)
    save_reading(deferred, tmp_path / "doc.locret")
    loaded = session.open(str(tmp_path / "doc.locret"))
    assert loaded.engine.kept_tokens == SETTINGS.budget
    assert all(torch.equal(a, b) for a, b in zip(keys(loaded), keys(eager)))
    mapped = session.read(path, SETTINGS, defer=True)
    assert mapped.kept_map() == eager.kept_map() and mapped.pending is None


def test_a_read_for_questions_is_never_deferred(session_and_path):
    session, path = session_and_path
    finch = Session(replace(session.loaded, defaults={**session.loaded.defaults, "policy": "finch"}), None)
    reading = finch.read(path, replace(SETTINGS, policy="finch"), questions=[LOCATED], defer=True)
    assert reading.pending is None and reading.engine.kept_tokens == SETTINGS.budget


def test_session_ask_defers(session_and_path):
    session, path = session_and_path
    session.loaded.defaults = {"reread": 1, "reread_tokens": 48, "locate": "words", "max_new_tokens": 4}
    result = session.ask(path, LOCATED, SETTINGS)
    assert result.windows and not result.kv_cache.holds_document


def test_cli_answers_from_the_window_unread_unless_asked_to_read_first(doc):  # noqa: F811
    question = "What is the gate code of the north depot?"
    args = [doc, question, "--reread", "1", "--locate", "words", "--json"]
    lazy, eager = ask(*args), ask(*args, "--read-first")
    assert lazy.exit_code == 0 and eager.exit_code == 0, lazy.output + eager.output
    lazy, eager = json.loads(lazy.stdout), json.loads(eager.stdout)
    assert lazy["windows"] and lazy["windows"] == eager["windows"] and lazy["answer"] == eager["answer"]
    assert lazy["kv_cache"]["holds_document"] is False and lazy["kv_cache"]["kept_tokens"] == 0
    assert eager["kv_cache"]["holds_document"] is True and eager["kv_cache"]["kept_tokens"] == 1024
    assert lazy["document"]["tokens"] == eager["document"]["tokens"]
    table = ask(doc, question, "--reread", "1", "--locate", "words")
    assert table.exit_code == 0 and "bounded read not run" in table.stderr


def test_cli_reads_for_a_question_that_names_no_window(doc):  # noqa: F811
    result = ask(doc, "Who counts the sacks?", "--reread", "1", "--locate", "words", "--no-strict", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["windows"] is None and data["kv_cache"]["holds_document"] is True
    assert data["kv_cache"]["kept_tokens"] == 1024


def test_chat_answers_unread_and_saves_only_after_reading(session_and_path, tmp_path):
    import io

    from rich.console import Console

    from locret_cli.api.conversation import Conversation
    from locret_cli.cli.chat import run_chat

    session, path = session_and_path
    reading = session.read(path, SETTINGS, defer=True)
    (tmp_path / "taken.locret").write_bytes(b"someone's file")
    out, err = io.StringIO(), io.StringIO()
    conversation = Conversation(reading, answering=WORDS)

    def chat(*lines):
        given = iter(lines)
        run_chat(conversation, lambda: next(given), Console(file=out, width=200), Console(file=err, width=200))

    chat(LOCATED, f"/save {tmp_path / 'taken.locret'}", "/quit")
    assert conversation.results[0].windows and not conversation.results[0].kv_cache.holds_document
    assert "already exists" in err.getvalue() and (tmp_path / "taken.locret").read_bytes() == b"someone's file"
    assert reading.pending is not None  # refused before reading
    chat(f"/save {tmp_path / 'new.locret'}", "/quit")
    assert reading.pending is None and session.open(str(tmp_path / "new.locret")).engine.kept_tokens == SETTINGS.budget


def test_the_progress_bar_names_tokenizing_apart_from_reading():
    from rich.console import Console

    from locret_cli.cli.report import DocumentProgress
    from locret_cli.core.engine import Progress

    bar = DocumentProgress(Console(file=io.StringIO()), enabled=False)
    assert not bar.bar.tasks  # opened by the first event, sized by it
    phases = []
    for event in (Progress(100, 1, 1, 1, 0, reading=False, unit="pages", units_total=10),
                  Progress(200, 2, 2, 2, 64, unit="pages", units_total=10)):
        bar.update(event)
        phases.append(bar.bar.tasks[0].fields["phase"])
    assert phases == ["tokenizing", "reading"] and bar.bar.tasks[0].total == 10
