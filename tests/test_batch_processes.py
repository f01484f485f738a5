"""`locret batch` across processes: local workers that die are retried once, and a run killed part-way resumes with
no row lost and none duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers.batch import QUESTIONS, EchoWorker, UnloadableWorker, fact_document, questions_file

from locret_cli.batch.answer_log import AnswerLog
from locret_cli.batch.inputs import expand_inputs
from locret_cli.batch.local_pool import LocalPool
from locret_cli.batch.scheduler import run_batch
from locret_cli.batch.work import WorkerSpec
from locret_cli.errors import LocretError
from locret_cli.models.spec import ModelSpec


def echo_corpus(tmp_path) -> list:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.txt", "crash-once.txt", "doom.txt", "z.txt"):
        (docs / name).write_text(f"first line of {name}\nmore\n")
    return expand_inputs(str(docs), questions_file(tmp_path))


def test_a_dead_worker_is_replaced_and_its_document_retried_once(tmp_path):
    jobs = echo_corpus(tmp_path)
    out = tmp_path / "out.jsonl"
    spec = WorkerSpec(threads=1)
    with AnswerLog.open(out, spec.identity()) as log:
        summary = run_batch(jobs, log, LocalPool(spec, workers=2, factory=EchoWorker))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_doc = {}
    for row in rows:
        by_doc.setdefault(row["source"].rsplit("/", 1)[1], []).append(row)
    assert sorted(by_doc) == ["a.txt", "crash-once.txt", "doom.txt", "z.txt"] and len(rows) == 8
    assert [r["answer"] for r in by_doc["crash-once.txt"]] == [f"first line of crash-once.txt | {q}" for q in QUESTIONS]
    assert all(r["error"] is None for name in ("a.txt", "z.txt", "crash-once.txt") for r in by_doc[name])
    assert {r["error"] for r in by_doc["doom.txt"]} == {"a worker died reading this document (exit code 9), 2 times"}
    assert (summary.documents, summary.answered, summary.failed, summary.retries) == (4, 6, 2, 2)


def test_a_worker_that_cannot_load_the_model_stops_the_batch_in_one_line(tmp_path):
    jobs = echo_corpus(tmp_path)
    with AnswerLog.open(tmp_path / "out.jsonl", WorkerSpec().identity()) as log:
        with pytest.raises(LocretError, match="a worker could not load the model: no such model: ./nowhere"):
            run_batch(jobs, log, LocalPool(WorkerSpec(ModelSpec(model="./nowhere")), workers=1, factory=UnloadableWorker))


def batch_command(docs, questions, out) -> list[str]:
    return [sys.executable, "-m", "locret_cli", "batch", str(docs), "--questions", questions, "--out", str(out),
            "--workers", "1", "--device", "cpu", "--json"]


def test_a_run_killed_part_way_resumes_with_every_row_once(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    facts = {f"doc{i}.txt": fact_document(docs / f"doc{i}.txt", seed=10 + i, paragraphs=100) for i in range(4)}
    questions, out = questions_file(tmp_path), tmp_path / "answers.jsonl"
    run = subprocess.Popen(batch_command(docs, questions, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if out.exists() and len(out.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert run.poll() is None, "the run finished before it could be killed"
    os.killpg(run.pid, signal.SIGKILL)  # the driver and its worker, as a lost machine would
    run.wait()
    written = len(out.read_text().splitlines())
    assert 2 <= written < 8
    finished = subprocess.run(batch_command(docs, questions, out), capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    summary = json.loads(finished.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8 and len({row["key"] for row in rows}) == 8
    assert summary["skipped"] == written and summary["answered"] == 8 - written
    for row in rows:
        gate, key = facts[row["source"].rsplit("/", 1)[1]]
        expected = f"The gate code of the north depot is {gate}." if "gate" in row["question"] else f"The pass key is {key}."
        assert row["answer"] == expected and row["error"] is None


def test_bad_documents_exit_3_and_sort_restores_input_order(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    gate, key = fact_document(docs / "b-good.txt", seed=3)
    (docs / "a-corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not really a pdf\n")
    out = tmp_path / "answers.jsonl"
    command = batch_command(docs, questions_file(tmp_path), out) + ["--sort"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 3, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["documents"], summary["answered"], summary["failed"]) == (2, 2, 2)
    corrupt = docs / "a-corrupt.pdf"
    assert summary["failures"] == [f"{corrupt}: {corrupt} is not a readable PDF (PdfStreamError: Stream has ended "
                                   "unexpectedly)"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["source"].rsplit("/", 1)[1], r["question"]) for r in rows] == [
        ("a-corrupt.pdf", QUESTIONS[0]), ("a-corrupt.pdf", QUESTIONS[1]),
        ("b-good.txt", QUESTIONS[0]), ("b-good.txt", QUESTIONS[1])]
    assert [r["answer"] for r in rows[2:]] == [f"The gate code of the north depot is {gate}.", f"The pass key is {key}."]
