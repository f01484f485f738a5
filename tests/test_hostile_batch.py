"""`locret batch` never destroys a user's file: a file that is not a batch log is refused untouched, `--out` may not
be one of the batch's inputs, rewriting a log keeps its mode, and crafted rows are refused in one line."""

from __future__ import annotations

import json
import os
import stat

import pytest
from helpers.batch import QUESTIONS, fact_document, questions_file
from typer.testing import CliRunner

from locret_cli.batch.answer_log import AnswerLog, row_key
from locret_cli.batch.inputs import expand_inputs
from locret_cli.batch.work import WorkerSpec, error_rows
from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.files import replacing, write_synced

RUN = WorkerSpec().identity()


def snapshot(*paths) -> dict:
    """Each file's bytes and permission bits, to compare after a run."""
    return {path: (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) for path in paths}


def batch(*args: str):
    return CliRunner().invoke(app, ["batch", *args])


def refused(result, message: str) -> None:
    """The run exited 1 with `message` as its one line of error."""
    assert (result.exit_code, result.stdout, result.stderr.splitlines()) == (1, "", [f"error: {message}"]), \
        result.output


def a_row(question: str = QUESTIONS[0], **fields) -> dict:
    """A row with a batch row's fields, `fields` replacing some."""
    row = {"key": row_key("sha", question), "source": "a.txt", "question": question, "answer": "x", "error": None,
           "run": RUN}
    return {**row, **fields}


def log_text(*rows: dict) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()


@pytest.fixture
def document(tmp_path):
    (tmp_path / "a.txt").write_text("The pass key is 12345.\n")
    return str(tmp_path / "a.txt")


NOT_LOGS = [  # (the file's bytes, the line refused)
    (b'{"a": 1}\n{"b": 2}', 1),  # the user's own JSONL, no final newline
    (b'{"a": 1}', 1),  # one line, no newline
    (log_text(a_row()) + b'{"key": 1}', 2),  # a whole last line that is no row
    (log_text(a_row()) + b'{"key": "0123"}', 2),  # begins as a row does, yet is whole
    (log_text(a_row()) + b'{"question": "Who?"', 2),  # cut short, but not the start of a row
    (log_text(a_row()) + b"hello", 2),
    (log_text(a_row()) + b'{"key": "0123\n' + log_text(a_row("Q2?")), 2),  # a torn row inside is not ours
    (b"\xef\xbb\xbf" + log_text(a_row()), 1),  # a byte-order mark
]


@pytest.mark.parametrize("data, line", NOT_LOGS)
def test_a_file_that_is_not_a_log_is_refused_untouched(tmp_path, data, line):
    out = tmp_path / "mydata.jsonl"
    out.write_bytes(data)
    before = snapshot(out)
    with pytest.raises(LocretError) as refusal:
        AnswerLog.open(out, RUN, retry_failed=True)
    assert str(refusal.value) == f"{out} line {line} is not a locret batch row: write to another out"
    assert snapshot(out) == before


def test_the_cli_refuses_a_users_jsonl_without_deleting_its_last_line(tmp_path, document):
    out = tmp_path / "mydata.jsonl"
    out.write_bytes(b'{"a": 1}\n{"b": 2}')
    os.chmod(out, 0o640)
    before = snapshot(out, tmp_path / "a.txt")
    refused(batch(document, "--questions", questions_file(tmp_path), "--out", str(out), "--sort"),
            f"{out} line 1 is not a locret batch row: write to another --out")
    assert snapshot(out, tmp_path / "a.txt") == before


def test_an_empty_file_is_a_new_log_and_a_whole_last_row_gets_its_newline(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"")
    with AnswerLog.open(out, RUN) as log:
        assert (log.rows, log.torn_bytes) == ({}, 0)
    assert out.read_bytes() == b""
    whole = log_text(a_row(), a_row("Q2?"))
    out.write_bytes(whole[:-1])  # a hand-edited log whose editor dropped the final newline
    with AnswerLog.open(out, RUN) as log:
        assert len(log.rows) == 2 and log.torn_bytes == 0
    assert out.read_bytes() == whole


@pytest.mark.parametrize("torn", [b'{"key": "0123456789abcdef', b'{"k', b"{"])
def test_a_torn_last_row_of_a_log_is_cut(tmp_path, torn):
    out = tmp_path / "out.jsonl"
    kept = log_text(a_row())
    out.write_bytes(kept + torn)
    with AnswerLog.open(out, RUN) as log:
        assert len(log.rows) == 1 and log.torn_bytes == len(torn)
    assert out.read_bytes() == kept
    out.write_bytes(torn)  # a run killed while writing its first row
    with AnswerLog.open(out, RUN) as log:
        assert (log.rows, log.torn_bytes) == ({}, len(torn))
    assert out.read_bytes() == b""


def deep(depth: int):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


CRAFTED = {
    "run not a dict": a_row(run=5),
    "run a list": a_row(run=[1]),
    "run a string": a_row(run="x"),
    "key a list": a_row(key=["x"]),
    "key a number": a_row(key=5),
    "key null": a_row(key=None),
    "error a list": a_row(error=["e"]),
    "error a dict": a_row(error={"a": 1}),
    "answer a number": a_row(answer=3),
    "source null": a_row(source=None),
    "question a list": a_row(question=["Q?"]),
    "a field missing": {name: value for name, value in a_row().items() if name != "error"},
    "a list": [a_row()],
    "a string": "row",
    "null": None,
    "nested 100 deep": a_row(sources=deep(100)),
}
CRAFTED_LINES = {
    "nested 100,000 deep": b'{"key": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "a 10,000-digit number": b'{"key": "k", "n": ' + b"7" * 10_000 + b"}",
    "not UTF-8": json.dumps(a_row()).encode().replace(b'"x"', b'"\xff"'),
}


@pytest.mark.parametrize("line", [json.dumps(row).encode() for row in CRAFTED.values()] + list(CRAFTED_LINES.values()),
                         ids=list(CRAFTED) + list(CRAFTED_LINES))
def test_crafted_rows_are_refused_in_one_line(tmp_path, line):
    out = tmp_path / "out.jsonl"
    out.write_bytes(log_text(a_row("Q1?", error="boom")) + line + b"\n")
    before = snapshot(out)
    for retry_failed in (False, True):
        with pytest.raises(LocretError) as refusal:
            AnswerLog.open(out, RUN, retry_failed)
        assert str(refusal.value) == f"{out} line 2 is not a locret batch row: write to another out"
    assert snapshot(out) == before


def test_the_cli_refuses_a_crafted_row_in_one_line(tmp_path, document):
    out = tmp_path / "out.jsonl"
    out.write_bytes(log_text(a_row(run=[1], error=["e"])))
    before = snapshot(out)
    refused(batch(document, "--questions", questions_file(tmp_path), "--out", str(out), "--retry-failed"),
            f"{out} line 1 is not a locret batch row: write to another --out")
    assert snapshot(out) == before


def test_rows_holding_line_breaks_and_undecodable_path_bytes_read_back(tmp_path):
    (tmp_path / "q.txt").write_text("What?\n")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff.txt"), "wb") as f:
        f.write(b"hello\n")
    (job,) = expand_inputs(str(tmp_path / "bad*.txt"), str(tmp_path / "q.txt"))
    rows = error_rows(job, WorkerSpec(), None, "test")
    rows[0]["answer"] = "one\u2028two\x85three\rfour"
    out = tmp_path / "out.jsonl"
    with AnswerLog.open(out, RUN) as log:
        log.append(rows)
    with AnswerLog.open(out, RUN) as log:
        assert list(log.rows.values()) == rows
        log.sort([])
    with AnswerLog.open(out, RUN) as log:
        assert list(log.rows.values()) == rows


def test_out_may_not_be_the_questions_file_or_another_input(tmp_path, document):
    questions = tmp_path / "q.jsonl"
    questions.write_bytes(b'{"question": "What is the pass key?"}\n{"question": "Who?"}')
    (tmp_path / "link.jsonl").symlink_to(questions)
    os.link(questions, tmp_path / "hard.jsonl")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"source": "a.txt", "questions": ["Q?"]}) + "\n"
                      + json.dumps({"source": "answers.jsonl", "questions": ["Q?"]}) + "\n")
    before = snapshot(questions, corpus, tmp_path / "a.txt")
    for out in (questions, tmp_path / "link.jsonl", tmp_path / "hard.jsonl", tmp_path / "." / "q.jsonl"):
        refused(batch(document, "--questions", str(questions), "--out", str(out)),
                f"--out {out} is also the --questions file: write the answers to another file")
    refused(batch(str(corpus), "--out", str(corpus)),
            f"--out {corpus} is also the corpus of documents to read: write the answers to another file")
    answers = tmp_path / "answers.jsonl"
    refused(batch(str(corpus), "--out", str(answers)),
            f"--out {answers} is also a document that {corpus} lists: write the answers to another file")
    assert snapshot(questions, corpus, tmp_path / "a.txt") == before and not answers.exists()
    hard = tmp_path / "hard.jsonl"
    with pytest.raises(LocretError) as refusal:  # the library refuses it too
        expand_inputs(document, str(questions), exclude=(str(hard),))
    assert str(refusal.value) == f"out {hard} is also the questions file: write the answers to another file"


def test_a_glob_still_skips_the_output_under_any_name_and_the_questions_file(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    (tmp_path / "out.jsonl").write_text("")
    os.link(tmp_path / "out.jsonl", tmp_path / "alias.jsonl")
    jobs = expand_inputs(str(tmp_path / "*"), questions_file(tmp_path), exclude=(str(tmp_path / "alias.jsonl"),))
    assert [job.source for job in jobs] == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]


def test_an_out_that_is_no_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(LocretError, match=r"^cannot write .*pipe\.jsonl: it is not a regular file$"):
        AnswerLog.open(tmp_path / "pipe.jsonl", RUN)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o606], ids=oct)
def test_retry_failed_and_sort_keep_the_logs_mode(tmp_path, mode):
    out = tmp_path / "out.jsonl"
    out.write_bytes(log_text(a_row("Q1?", error="boom"), a_row("Q2?"), a_row("Q3?")))
    os.chmod(out, mode)
    with AnswerLog.open(out, RUN, retry_failed=True) as log:
        assert stat.S_IMODE(out.stat().st_mode) == mode
        log.sort([row_key("sha", "Q3?")])
    assert stat.S_IMODE(out.stat().st_mode) == mode and out.read_bytes() == log_text(a_row("Q3?"), a_row("Q2?"))


def test_rewriting_through_a_link_keeps_the_link(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_bytes(log_text(a_row("Q1?", error="boom"), a_row("Q2?")))
    (tmp_path / "link.jsonl").symlink_to(target)
    with AnswerLog.open(tmp_path / "link.jsonl", RUN, retry_failed=True):
        pass
    assert (tmp_path / "link.jsonl").is_symlink() and target.read_bytes() == log_text(a_row("Q2?"))


def test_replacing_keeps_an_existing_mode_and_gives_a_new_file_the_umask(tmp_path):
    kept, new = tmp_path / "kept.txt", tmp_path / "new.txt"
    kept.write_text("old")
    os.chmod(kept, 0o600)
    umask = os.umask(0o027)
    try:
        for path in (kept, new):
            with replacing(path) as temporary:
                assert stat.S_IMODE(temporary.stat().st_mode) == 0o600  # nobody else reads it half-written
                write_synced(temporary, lambda f: f.write("new"))
    finally:
        os.umask(umask)
    assert [(p.read_text(), stat.S_IMODE(p.stat().st_mode)) for p in (kept, new)] == [("new", 0o600), ("new", 0o640)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "new.txt"]


def test_a_real_log_with_a_torn_row_resumes_and_keeps_its_mode(tmp_path):
    fact_document(tmp_path / "doc.txt", seed=2)
    out, questions = tmp_path / "answers.jsonl", questions_file(tmp_path)
    args = (str(tmp_path / "doc.txt"), "--questions", questions, "--out", str(out), "--workers", "1", "--threads",
            "1", "--device", "cpu", "--json")
    first = batch(*args)
    assert first.exit_code == 0, first.output
    whole = out.read_bytes()
    first_row, second_row = whole.splitlines(keepends=True)
    out.write_bytes(first_row + second_row[: len(second_row) // 2])
    os.chmod(out, 0o600)
    resumed = batch(*args, "--sort")
    assert resumed.exit_code == 0, resumed.output
    assert f"ended in a row cut short ({len(second_row) // 2} bytes)" in resumed.stderr
    summary = json.loads(resumed.stdout)
    assert (summary["answered"], summary["skipped"], summary["failed"]) == (1, 1, 0)
    rows = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert out.read_bytes().startswith(first_row) and [r["question"] for r in rows] == QUESTIONS
    assert rows[1]["answer"] == json.loads(second_row)["answer"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
