"""Documents and stand-in workers for the batch tests. The workers load no model, so a process or actor starts in
well under a second; they live in this module so that spawned processes and Ray actors can import them by name.

A document's name says what its worker does: `crash-once*` kills the worker the first time it is read (a marker
file beside it remembers), `doom*` kills it every time; any other is answered with its first line.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from locret_cli.batch.work import JobResult, error_rows
from locret_cli.bench.synthetic import Fact
from locret_cli.errors import LocretError
from recipes.sample_documents import document

QUESTIONS = ["What is the gate code of the north depot?", "What is the pass key?"]


def fact_document(path, seed: int, paragraphs: int = 40) -> tuple[str, str]:
    """A text document hiding a gate code and a pass key; returns (gate code, pass key)."""
    rng = random.Random(seed)
    gate, key = str(rng.randint(1000, 9999)), str(rng.randint(10000, 99999))
    facts = [(Fact(f"The gate code of the north depot is {gate}.", QUESTIONS[0], gate, "attribute"), 0.3),
             (Fact(f"The pass key is {key}. Remember it.", QUESTIONS[1], key, "passkey"), 0.8)]
    path.write_text(document(seed, paragraphs, facts))
    return gate, key


def questions_file(tmp_path):
    path = tmp_path / "questions.txt"
    path.write_text("\n".join(QUESTIONS) + "\n")
    return str(path)


class EchoWorker:
    def __init__(self, spec):
        self.spec, self.name = spec, f"echo:{os.getpid()}"

    def answer(self, job, on_tokens=None) -> JobResult:
        path = Path(job.source)
        marker = path.with_name(path.name + ".died")
        if path.name.startswith("doom") or path.name.startswith("crash-once") and not marker.exists():
            marker.touch()
            os._exit(9)
        first = path.read_text().splitlines()[0]
        if on_tokens:
            on_tokens(len(first))
        rows = error_rows(job, self.spec, None, self.name)
        for row in rows:
            row["answer"] = f"{first} | {row['question']}"
        return JobResult(rows, len(first))


class UnloadableWorker:
    def __init__(self, spec):
        raise LocretError(f"no such model: {spec.model.model}")
