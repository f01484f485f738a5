"""A batch from start to end: drop what the log already holds, hand the rest to a pool, append each document's rows
as they come, and count what happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from locret_cli.batch.answer_log import AnswerLog, row_key
from locret_cli.batch.inputs import Job
from locret_cli.batch.work import JobResult, error_rows


@dataclass
class BatchProgress:
    """Where a batch stands, sent after every document and every chunk a local worker reads."""

    documents: int  # documents to read in this run
    questions: int  # questions to answer in this run
    documents_done: int = 0
    questions_done: int = 0
    failed: int = 0  # error rows written so far
    retries: int = 0
    tokens_read: int = 0  # by documents finished
    tokens_in_flight: dict[int, int] = field(default_factory=dict)  # by job index, as local workers read
    elapsed_s: float = 0.0
    ungrounded: int = 0  # answers whose content is not in the document as written (withheld ones included)


@dataclass
class BatchSummary:
    """What a run did. `skipped` rows were already in the log; tokens per second counts this run's reading."""

    documents: int
    answered: int
    failed: int
    skipped: int
    retries: int
    tokens_read: int
    wall_s: float
    pool: str
    workers: int | None
    failures: list[str] = field(default_factory=list)  # "source: error", one per failed document
    ungrounded: int = 0  # answers whose content is not in the document as written (withheld ones included)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_read / self.wall_s if self.wall_s else 0.0

    @property
    def documents_per_hour(self) -> float:
        return self.documents * 3600 / self.wall_s if self.wall_s else 0.0

    def to_json(self) -> dict:
        return {**vars(self), "wall_s": round(self.wall_s, 3), "tokens_per_s": round(self.tokens_per_s, 1),
                "documents_per_hour": round(self.documents_per_hour, 1)}


def pending(jobs: list[Job], log: AnswerLog) -> tuple[list[Job], int]:
    """The jobs with only their questions the log lacks (jobs left with none dropped), and how many were skipped."""
    todo, skipped = [], 0
    for job in jobs:
        questions = [q for q in job.questions if not log.done(row_key(job.document_id, q))]
        skipped += len(job.questions) - len(questions)
        if questions:
            todo.append(replace(job, questions=questions))
    return todo, skipped


def input_order(jobs: list[Job]) -> list[str]:
    """Every row key the inputs ask for, in input order: what `--sort` restores."""
    return [row_key(job.document_id, q) for job in jobs for q in job.questions]


def run_batch(jobs: list[Job], log: AnswerLog, pool, on_progress: Callable[[BatchProgress], None] = lambda p: None,
              clock: Callable[[], float] = time.perf_counter) -> BatchSummary:
    """Answer every question of every job that `log` does not hold yet, appending rows as each document finishes.
    Documents that cannot even be hashed get their error rows here, without a worker."""
    todo, skipped = pending(jobs, log)
    unreadable = [job for job in todo if job.error]
    todo = [job for job in todo if not job.error]
    progress = BatchProgress(len(todo) + len(unreadable), sum(len(job.questions) for job in todo + unreadable))
    failures: list[str] = []
    started = clock()

    def record(job: Job, result: JobResult) -> None:
        log.append(result.rows)
        errors = [row["error"] for row in result.rows if row["error"]]
        if errors:
            failures.append(f"{job.source}: {errors[0]}")
        progress.documents_done += 1
        progress.questions_done += len(result.rows)
        progress.failed += len(errors)
        progress.ungrounded += sum(ungrounded(row) for row in result.rows)
        progress.tokens_in_flight.pop(job.index, None)
        progress.tokens_read += result.tokens_read
        tick()

    def reading(job: Job, tokens: int) -> None:
        progress.tokens_in_flight[job.index] = progress.tokens_in_flight.get(job.index, 0) + tokens
        tick()

    def tick() -> None:
        progress.elapsed_s = clock() - started
        on_progress(progress)

    def retried(job: Job, reason: str) -> None:  # the reason is in the error rows if the retry dies too
        progress.tokens_in_flight.pop(job.index, None)
        progress.retries += 1
        tick()

    tick()
    for job in unreadable:
        record(job, JobResult(error_rows(job, pool.spec, job.error, None)))
    if todo:
        pool.run(todo, record, reading, retried)
    return BatchSummary(progress.documents, progress.questions_done - progress.failed, progress.failed, skipped,
                        progress.retries, progress.tokens_read, clock() - started, pool.name, pool.workers, failures,
                        progress.ungrounded)


def ungrounded(row: dict) -> bool:
    """Whether a row's answer holds content the document does not (`checks/grounding.py`)."""
    grounding = row.get("grounding")
    return bool(grounding) and grounding["status"] in ("partial", "not_found")
