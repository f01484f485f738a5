"""`locret batch --ray` on a Ray cluster started here, bound to 127.0.0.1, with 2 actors: the same answers as a
local run, a dead actor's document retried once on a fresh actor, and the CLI starting its own local cluster.

Needs the `ray` extra (`pip install -e '.[ray]'`); CI installs it and runs this file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install -e '.[ray]'")

from helpers.batch import QUESTIONS, EchoWorker, fact_document, questions_file  # noqa: E402

from locret_cli.batch.answer_log import AnswerLog  # noqa: E402
from locret_cli.batch.inputs import expand_inputs  # noqa: E402
from locret_cli.batch.ray_pool import RayPool  # noqa: E402
from locret_cli.batch.scheduler import run_batch  # noqa: E402
from locret_cli.batch.work import DocumentWorker, WorkerSpec  # noqa: E402
from locret_cli.models.spec import ModelSpec

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _node_ip_address="127.0.0.1", runtime_env={"env_vars": {"PYTHONPATH": TESTS}})
    yield
    ray.shutdown()


def rows_of(path) -> dict:
    return {row["key"]: row for row in map(json.loads, Path(path).read_text().splitlines())}


def test_two_actors_give_the_answers_of_a_local_run(cluster, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        fact_document(docs / f"doc{i}.txt", seed=20 + i, paragraphs=60)
    jobs = expand_inputs(str(docs), questions_file(tmp_path))
    spec = WorkerSpec(ModelSpec(device="cpu"), threads=1)
    with AnswerLog.open(tmp_path / "ray.jsonl", spec.identity()) as log:
        summary = run_batch(jobs, log, RayPool("local", spec, workers=2))
    local = DocumentWorker(spec)
    expected = {row["key"]: row for job in jobs for row in local.answer(job).rows}
    got = rows_of(tmp_path / "ray.jsonl")
    assert (summary.documents, summary.answered, summary.failed, summary.pool) == (4, 8, 0, "ray")
    assert sorted(got) == sorted(expected)
    for key, row in expected.items():
        assert (got[key]["answer"], got[key]["sources"]) == (row["answer"], row["sources"])
    assert len({row["worker"] for row in got.values()}) == 2  # both actors took documents


def test_a_dead_actor_is_replaced_and_its_document_retried_once(cluster, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.txt", "crash-once.txt", "doom.txt"):
        (docs / name).write_text(f"first line of {name}\n")
    jobs = expand_inputs(str(docs), questions_file(tmp_path))
    spec = WorkerSpec(threads=1)
    with AnswerLog.open(tmp_path / "out.jsonl", spec.identity()) as log:
        summary = run_batch(jobs, log, RayPool("local", spec, workers=2, factory=EchoWorker))
    rows = list(rows_of(tmp_path / "out.jsonl").values())
    answers = {(Path(r["source"]).name, r["question"]): (r["answer"], r["error"]) for r in rows}
    assert answers[("crash-once.txt", QUESTIONS[0])] == (f"first line of crash-once.txt | {QUESTIONS[0]}", None)
    assert answers[("doom.txt", QUESTIONS[1])][1].startswith("a Ray actor died reading this document")
    assert (len(rows), summary.answered, summary.failed, summary.retries) == (6, 4, 2, 2)


def test_the_cli_starts_a_local_cluster_and_resumes_like_a_local_run(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(2):
        fact_document(docs / f"doc{i}.txt", seed=30 + i)
    out = tmp_path / "answers.jsonl"
    command = [sys.executable, "-m", "locret_cli", "batch", str(docs), "--questions", questions_file(tmp_path),
               "--out", str(out), "--ray", "local", "--workers", "2", "--device", "cpu", "--json"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["answered"] == 4 and len(rows_of(out)) == 4
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert json.loads(again.stdout)["skipped"] == 4 and len(out.read_text().splitlines()) == 4
