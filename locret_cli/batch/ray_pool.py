"""The same work unit on a Ray cluster: one actor per model replica, each loading the model once, documents handed
to whichever actor is free. The driver (this process) receives every result and alone writes the output.

Ray schedules the actors and moves the data; this module only keeps each actor busy with one document and hands a
dead actor's document to a fresh actor once. `ray` is an optional extra: pip install 'locret-cli[ray]'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from locret_cli.batch.inputs import Job
from locret_cli.batch.local_pool import JobQueue
from locret_cli.batch.work import DocumentWorker, JobResult, WorkerSpec, one_line
from locret_cli.errors import LocretError, SettingError


class RayWorker:
    """The actor: one loaded model."""

    def __init__(self, spec: WorkerSpec, factory: Callable[[WorkerSpec], DocumentWorker]):
        self.worker = factory(spec)

    def ready(self) -> str:
        return self.worker.name

    def answer(self, job: Job) -> JobResult:
        return self.worker.answer(job)


def import_ray():
    try:
        import ray
    except ImportError:
        raise SettingError("{ray} needs Ray: pip install 'locret-cli[ray]'") from None
    return ray


class RayPool:
    """`workers` actors on the Ray cluster at `address` ("auto": the running cluster; "local": start one here;
    or host:port / ray://host:port). With workers None: one actor per GPU, or per `spec.threads` CPUs."""

    name = "ray"

    def __init__(self, address: str, spec: WorkerSpec, workers: int | None = None,
                 factory: Callable[[WorkerSpec], DocumentWorker] = DocumentWorker):
        if workers is not None and workers < 1:
            raise SettingError("{workers} must be at least 1")
        self.ray = import_ray()
        self.address, self.spec, self.workers, self.factory = address, spec, workers, factory

    def run(self, jobs: list[Job], on_result: Callable[[Job, JobResult], None],
            on_tokens: Callable[[Job, int], None] = lambda j, n: None,
            on_retry: Callable[[Job, str], None] = lambda j, r: None) -> None:
        """Answer every job, calling `on_result` in completion order, in this process."""
        ray = self.ray
        started_here = not ray.is_initialized()
        if started_here:
            self._connect()
        actors = []
        try:
            actor_class = self._actor_class()
            self.workers = self.workers or self._default_workers()
            count = min(len(jobs), self.workers)
            actors = [actor_class.remote(self.spec, self.factory) for _ in range(count)]
            self._wait_ready(actors)
            self._drive(actor_class, actors, jobs, on_result, on_retry)
        finally:
            for actor in actors:
                ray.kill(actor)
            if started_here:
                ray.shutdown()

    def _connect(self) -> None:
        logging.getLogger("ray").setLevel(logging.ERROR)  # our bar and summary replace Ray's start-up lines
        try:
            self.ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                          configure_logging=False)
        except ConnectionError as exc:
            raise LocretError(f"no Ray cluster at {self.address}: {one_line(exc)} (start one with `ray start "
                              "--head`, or pass --ray local)") from None

    def _gpus(self) -> int:
        return 0 if self.spec.model.device == "cpu" else int(self.ray.cluster_resources().get("GPU", 0))

    def _default_workers(self) -> int:
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return self._gpus() or max(1, cpus // (self.spec.threads or 1))

    def _actor_class(self):
        return self.ray.remote(RayWorker).options(num_cpus=self.spec.threads or 1, num_gpus=1 if self._gpus() else 0,
                                                  max_restarts=0)

    def _wait_ready(self, actors) -> None:
        try:
            self.ray.get([actor.ready.remote() for actor in actors])
        except self.ray.exceptions.RayActorError as exc:
            raise LocretError(f"a Ray actor could not load the model: {_cause(exc)}") from None

    def _drive(self, actor_class, actors, jobs, on_result, on_retry) -> None:
        ray = self.ray
        queue, running = JobQueue(jobs, self.spec), {}

        def hand_out(actor) -> None:
            if job := queue.take():
                running[actor.answer.remote(job)] = (actor, job)

        for actor in actors:
            hand_out(actor)
        while running:
            [done], _ = ray.wait(list(running), num_returns=1)
            actor, job = running.pop(done)
            try:
                result = ray.get(done)
            except ray.exceptions.RayActorError as exc:
                actors.remove(actor)
                queue.worker_died(job, f"a Ray actor died reading this document ({_cause(exc)})", on_result, on_retry)
                if not queue:
                    continue
                actor = actor_class.remote(self.spec, self.factory)
                actors.append(actor)
                self._wait_ready([actor])
            else:
                on_result(job, result)
            hand_out(actor)


def _cause(exc: Exception) -> str:
    """The first line of what a Ray error says, without Ray's own framing."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "Error" in line and not line.startswith("The actor")] or lines or ["unknown"]
    return useful[-1][:300]
