"""Worker processes on this machine: each loads the model once and is handed one document at a time.

A worker that dies (killed, out of memory, a crash in native code) is replaced and its document handed out once
more; a document that kills two workers becomes error rows. Workers ignore Ctrl-C: the driver stops them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait

from locret_cli.batch.inputs import Job
from locret_cli.batch.work import DocumentWorker, JobResult, WorkerSpec, error_rows, one_line
from locret_cli.errors import LocretError, SettingError

ATTEMPTS = 2  # a document is handed out at most this many times
STOP_WAIT_S = 10


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers(device: str) -> int:
    """Two CPU workers where there are two cores or more (on 2 cores, 2 one-thread workers read faster than one
    two-thread worker: docs/batch.md); one on a GPU, which a second copy of the model would only share."""
    if device == "cuda":
        return 1
    if device == "auto":
        import torch

        if torch.cuda.is_available():
            return 1
    return min(2, usable_cores())


def serve(conn, spec: WorkerSpec, factory: Callable[[WorkerSpec], DocumentWorker]) -> None:
    """A worker process: load, say ready, then answer each job sent until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        worker = factory(spec)
    except Exception as exc:  # noqa: BLE001  reported to the driver as one line
        conn.send(("failed", one_line(exc)))
        return
    conn.send(("ready", None))
    while (job := conn.recv()) is not None:
        conn.send(("done", worker.answer(job, on_tokens=lambda n: conn.send(("tokens", n)))))


class JobQueue:
    """Jobs waiting for a worker. A job whose worker died goes back to the front, until it has been handed out
    ATTEMPTS times; then it is written off as error rows."""

    def __init__(self, jobs: list[Job], spec: WorkerSpec):
        self.waiting, self.spec, self.handed = deque(jobs), spec, {job.index: 0 for job in jobs}

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def take(self) -> Job | None:
        job = self.waiting.popleft() if self.waiting else None
        if job:
            self.handed[job.index] += 1
        return job

    def worker_died(self, job: Job, reason: str, on_result, on_retry) -> None:
        if self.handed[job.index] < ATTEMPTS:
            on_retry(job, reason)
            self.waiting.appendleft(job)
        else:
            on_result(job, JobResult(error_rows(job, self.spec, f"{reason}, {ATTEMPTS} times", None)))


@dataclass
class Slot:
    process: multiprocessing.Process
    conn: object
    job: Job | None = None
    ready: bool = False


class LocalPool:
    """`workers` processes, each running `factory(spec)` once and then its `answer(job)` for job after job."""

    name = "local"

    def __init__(self, spec: WorkerSpec, workers: int,
                 factory: Callable[[WorkerSpec], DocumentWorker] = DocumentWorker):
        if workers < 1:
            raise SettingError("{workers} must be at least 1")
        self.spec, self.workers, self.factory = spec, workers, factory
        self.context = multiprocessing.get_context("spawn")

    def run(self, jobs: list[Job], on_result: Callable[[Job, JobResult], None],
            on_tokens: Callable[[Job, int], None] = lambda j, n: None,
            on_retry: Callable[[Job, str], None] = lambda j, r: None) -> None:
        """Answer every job, calling `on_result` in completion order, in this process."""
        queue = JobQueue(jobs, self.spec)
        slots = [self._start() for _ in range(min(self.workers, len(jobs)))]
        finished = False
        try:
            while queue or any(slot.job for slot in slots):
                waiting = {slot.conn: slot for slot in slots} | {slot.process.sentinel: slot for slot in slots}
                for ready in wait(list(waiting)):
                    slot = waiting[ready]
                    if slot in slots and not self._receive(slot, queue, on_result, on_tokens):
                        slots.remove(slot)
                        self._replace_dead_worker(slot, queue, on_result, on_retry)
                        if queue and len(slots) < self.workers:
                            slots.append(self._start())
            finished = True
        finally:
            self._stop(slots, finished)

    def _start(self) -> Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=serve, args=(child, self.spec, self.factory), daemon=True)
        process.start()
        child.close()
        return Slot(process, parent)

    def _receive(self, slot: Slot, queue: JobQueue, on_result, on_tokens) -> bool:
        """Handle every message `slot` has sent; False once its process has gone."""
        try:
            while slot.conn.poll():
                kind, payload = slot.conn.recv()
                if kind == "failed":
                    raise LocretError(f"a worker could not load the model: {payload}")
                if kind == "tokens":
                    on_tokens(slot.job, payload)
                    continue
                if kind == "done":
                    job, slot.job = slot.job, None
                    on_result(job, payload)
                slot.ready = True
                slot.job = queue.take()
                slot.conn.send(slot.job)
        except (EOFError, OSError):  # the pipe closes when the process ends, however it ends
            return False
        return True

    def _replace_dead_worker(self, slot: Slot, queue: JobQueue, on_result, on_retry) -> None:
        """A worker is gone: hand its document out again, or after ATTEMPTS deaths write it off."""
        slot.process.join(STOP_WAIT_S)
        code = slot.process.exitcode
        if not slot.ready:
            raise SettingError("a worker died while loading the model (exit code {code}); if memory is short, try "
                               "fewer {workers}", code=code)
        if slot.job is not None:
            queue.worker_died(slot.job, f"a worker died reading this document (exit code {code})", on_result, on_retry)

    def _stop(self, slots: list[Slot], finished: bool) -> None:
        """Let idle workers (sent None) exit; stop the rest at once when the run did not finish."""
        for slot in slots:
            if not finished and slot.process.is_alive():
                slot.process.terminate()
        for slot in slots:
            slot.process.join(STOP_WAIT_S)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()
