"""The batch's work unit: a worker loads the model once; each document it is handed is read once and every one of
its questions answered from a fork of that one reading. A bad document, or a question that cannot be asked,
becomes an error row; it never stops the worker.

Nothing here imports torch until a worker is built: the driver process never needs it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from locret_cli.batch.answer_log import row_key
from locret_cli.batch.inputs import Job
from locret_cli.errors import LocretError
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import DEFAULT_POLICY, settings_json, split_given


@dataclass
class WorkerSpec:
    """How a worker loads its model and answers: plain values, so it crosses to worker processes and Ray actors.
    `settings` holds only the settings given (None values left out); the model's recorded defaults fill the rest."""

    model: ModelSpec = field(default_factory=ModelSpec)
    settings: dict = field(default_factory=dict)
    sources: bool = True  # name the pages (or lines) each answer drew on
    save_contexts: str | None = None
    threads: int | None = None  # torch threads per worker; None leaves torch's default

    def identity(self) -> dict:
        """What the answers depend on, as given: rows made under another identity are not this run's answers (a
        row's "run")."""
        given, settings = self.model, {k: v for k, v in sorted(self.settings.items()) if k != "policy"}
        return {"model": given.model, "heads": given.heads, "policy": self.policy, "dtype": given.dtype,
                "load_4bit": given.load_4bit, "load_8bit": given.load_8bit,
                **({"load_int4": True} if given.load_int4 else {}), **settings}

    @property
    def policy(self) -> str:
        """The policy the documents are read with: the one given, else the default."""
        return self.settings.get("policy") or DEFAULT_POLICY


@dataclass
class JobResult:
    """A document's rows, and the tokens this worker read for it into the bounded cache (0 when its saved context
    was loaded, or when every answer came from re-read windows and the bounded read never ran)."""

    rows: list[dict]
    tokens_read: int = 0


class DocumentWorker:
    """A loaded model answering whole documents. Construct it once per process or actor."""

    def __init__(self, spec: WorkerSpec):
        import torch

        from locret_cli.api import load_session
        from locret_cli.api.reading import SOURCES_SHOWN
        from locret_cli.models.library_logs import quiet_libraries

        if spec.threads:
            torch.set_num_threads(spec.threads)
        quiet_libraries()
        self.spec = spec
        self.session = load_session(spec.model, reads_with=spec.policy)
        self.read, self.given_answer = split_given(spec.settings)
        self.answering = self.session.plan(self.read, self.given_answer).answer
        self.sources = SOURCES_SHOWN if spec.sources else 0
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def answer(self, job: Job, on_tokens: Callable[[int], None] | None = None) -> JobResult:
        """Read `job`'s document once and answer each of its questions; errors become rows."""
        progress = counted(on_tokens) if on_tokens else None
        try:
            reading = self._reading(job, progress)
        except Exception as exc:  # noqa: BLE001  a bad document is a row, never the end of the batch
            return JobResult(error_rows(job, self.spec, one_line(exc), self.name))
        rows = []
        for question in job.questions:
            try:
                result = reading.ask(question, self.answering, sources=self.sources, on_read=progress)
            except Exception as exc:  # noqa: BLE001
                rows.append(error_rows(job, self.spec, one_line(exc), self.name, [question])[0])
                continue
            rows.append(answer_row(job, self.spec, question, self.name, result))
        read_here = reading.loaded_from is None and reading.pending is None
        return JobResult(rows, reading.document.tokens if read_here else 0)

    def _reading(self, job: Job, progress):
        """The document's Reading: its saved context if there is one; else, when contexts are saved, the document
        read; else the document tokenized, its bounded read left for the first answer that needs it."""
        saved = None
        if self.spec.save_contexts:
            saved = Path(self.spec.save_contexts) / f"{Path(job.source).stem}-{job.sha256[:12]}.locret"
            if saved.exists():  # refused if it was read with other settings
                return self.session.open(str(saved), self.session.plan(self.read, self.given_answer,
                                                                       source=str(saved)))
        plan = self.session.plan(self.read, self.given_answer, questions=job.questions, defer=not saved)
        reading = self.session.open(job.source, plan, on_progress=progress)
        if saved:
            from locret_cli.api.saved_context import save_reading

            save_reading(reading, saved, self.session.heads)
        return reading


def counted(on_tokens: Callable[[int], None]) -> Callable:
    """A bounded read's progress callback that tells `on_tokens` how many tokens each chunk added. Tokenizing for a
    read left pending is not reading, and is not counted."""
    seen = [0]

    def progress(event) -> None:
        if not event.reading:
            return
        on_tokens(event.tokens - seen[0])
        seen[0] = event.tokens

    return progress


def answer_row(job: Job, spec: WorkerSpec, question: str, worker: str, result) -> dict:
    checked = result.grounding
    return row(job, spec, question, worker, answer=result.answer,
               sources=None if result.sources is None else [s.to_json() for s in result.sources],
               pages=result.document.pages, tokens=result.document.tokens, model=result.model, policy=result.policy,
               settings=settings_json(result.settings, result.answering),
               timings={"read_s": round(result.speed.read_s, 4), "answer_s": round(result.speed.answer_s, 4),
                        "loaded_from": result.context.loaded_from},
               grounding=None if checked.verdict is None else {**checked.verdict.to_json(),
                                                               "withheld": checked.withheld})


def error_rows(job: Job, spec: WorkerSpec, error: str, worker: str | None,
               questions: list[str] | None = None) -> list[dict]:
    """One row per question (all of `job`'s by default) saying why it has no answer."""
    return [row(job, spec, q, worker, error=error) for q in (job.questions if questions is None else questions)]


def row(job: Job, spec: WorkerSpec, question: str, worker: str | None, **fields) -> dict:
    """The one place a row's keys are listed (docs/batch.md); `fields` fills in what is known."""
    return {"key": row_key(job.document_id, question), "source": job.source, "source_sha256": job.sha256,
            "same_as": job.same_as, "question": question, "answer": None, "sources": None, "pages": None,
            "tokens": None, "model": spec.model.model, "policy": spec.policy, "settings": None,
            "run": spec.identity(),
            "timings": None, "grounding": None, "worker": worker, "error": None, **fields}


def one_line(exc: BaseException) -> str:
    """A LocretError's message; anything else prefixed with its type. Always a single line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text if isinstance(exc, LocretError) else f"{type(exc).__name__}: {text}".rstrip(": ")
