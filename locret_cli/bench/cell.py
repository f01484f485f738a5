"""One benchmark cell, (policy, length, task), measured in the process that runs it.

`locret bench` starts `python -m locret_cli.bench.cell` once per cell and repeat, so the peak RSS it reports belongs
to that cell alone. The spec arrives as JSON on stdin; the result leaves as one JSON line on stdout. A warm-up run
on a short document comes first and is left out of every figure.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import torch

from locret_cli.api import Session, load_session
from locret_cli.bench.baselines import Asked, baseline_readings, baseline_variant, is_baseline, unplaced
from locret_cli.bench.flops import FlopCounter, counting
from locret_cli.bench.rag import RAG_TOKENS
from locret_cli.bench.scoring import tally
from locret_cli.bench.tasks import Sample, data_samples, generated_samples
from locret_cli.core.measure import available_memory, full_cache_bytes, peak_memory, reset_peak, weight_bytes
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import AnswerSettings, ReadSettings, split_given


@dataclass
class CellSpec:
    length: int | None  # None with --data: the documents are the user's
    task: str
    samples: int
    settings: dict  # settings given; None values fall back to the model's defaults
    model: ModelSpec = field(default_factory=ModelSpec)  # as JSON, a dict of its fields
    data: str | None = None
    memory_limit_bytes: int | None = None  # what `full` may use, weights included; default: what is free now
    row: str = ""  # the bench row's label: the policy, and any settings of its own (`runner.row_variant`)
    rag_tokens: int = RAG_TOKENS  # a baseline row's cap (`baselines.py`), unless the row gives its own

    def __post_init__(self):
        if isinstance(self.model, dict):
            self.model = ModelSpec(**self.model)


def run_cell(spec: CellSpec) -> dict:
    """Every figure of one cell: accuracy, memory peaks, speed and the FLOPs it needed."""
    baseline = baseline_variant(spec.row, spec.rag_tokens) if is_baseline(spec.row) else None
    if baseline is not None and (reason := baseline.missing()):
        return {"skipped": reason, "model": None, "settings": baseline.settings()}
    read, answer = split_given(spec.settings)
    session = load_session(spec.model, reads_with=read.get("policy"))
    model, tokenizer = session.loaded.model, session.loaded.tokenizer
    if baseline is not None:
        answer = {**answer, "reread": 0}  # one read of the chosen text: nothing read again
    plan = session.plan(read, answer)
    settings, answering = plan.read, plan.answer
    resolved = {**asdict(settings), **asdict(answering), **(baseline.settings() if baseline else {})}
    longest = baseline.tokens if baseline else spec.length
    if not plan.evicts and longest is not None:
        reason = full_cache_misfit(model, plan.cache_entries(longest), spec.memory_limit_bytes)
        if reason:
            return {"skipped": reason, "model": session.loaded.name, "settings": resolved}
    samples = data_samples(spec.data) if spec.data else generated_samples(spec.task, tokenizer, spec.length,
                                                                          spec.samples)
    if baseline is not None and baseline.ranker is None and (reason := unplaced(samples)):
        return {"skipped": reason, "model": session.loaded.name, "settings": resolved}
    warm_up(session, settings)
    reset_peak(model.device)
    counter = FlopCounter(model)
    exact, right, verdicts, ttft, prefill, tokens, read_tokens = [], [], [], [], [], [], []
    decode_s, decode_steps, kv_peak = 0.0, 0, 0
    prefill_s = 0.0  # reading, question prefill and first tokens, over every sample and question
    by_depth: dict[str, list[bool]] = {}  # right answers by the needle's depth, for tasks that place one
    by_kind: dict[str, list[bool]] = {}  # right answers by the kind of question, for the kinds task
    started = time.perf_counter()
    with counting(model, counter):
        steps = baseline_readings(session, baseline, samples, settings) if baseline else \
            policy_readings(session, samples, settings)
        for asked in steps:
            sample, question, reading = asked.sample, asked.question, asked.reading
            result = reading.ask(question.question, answering, sources=0)
            exact.append(question.is_exact(result.answer))
            verdicts.append(question.verdict(result.answer, asked.judged))
            right.append(verdicts[-1] == "right")
            if question.kind is not None:
                by_kind.setdefault(question.kind, []).append(right[-1])
            if sample.depth is not None:
                by_depth.setdefault(f"{sample.depth:.2f}", []).append(right[-1])
            speed = result.speed
            decode_s, decode_steps = decode_s + speed.decode_s, decode_steps + speed.decode_steps
            prefill_s += speed.answer_s - speed.decode_s + (speed.read_s if asked.new_read else 0.0)
            kv_peak = max(kv_peak, result.kv_cache.peak_bytes)
            read_tokens.append(result.document.tokens)
            if asked.first:
                ttft.append(asked.before_s + speed.time_to_first_token_s)
                prefill.append(speed.prefill_tokens_per_s)
                tokens.append(asked.document_tokens)
    measured_s = time.perf_counter() - started
    peak, peak_kind = peak_memory(model.device)
    meaningful = spec.model.arch is None
    return {
        "accuracy": statistics.fmean(exact) if meaningful else None,
        "right_accuracy": statistics.fmean(right) if meaningful else None,
        "verdicts": tally(verdicts) if meaningful else None,
        "questions": len(exact),
        "document_tokens": round(statistics.median(tokens)),
        "read_tokens": round(statistics.median(read_tokens)),
        "kv_peak_bytes": kv_peak,
        "peak_bytes": peak,
        "peak_kind": peak_kind,
        "prefill_tokens_per_s": statistics.median(prefill),
        "decode_tokens_per_s": decode_steps / decode_s if decode_steps else None,
        "time_to_first_token_s": statistics.median(ttft),
        "flops": counter.total,
        "phases": {"prefill": {"flops": counter.prefill_flops, "seconds": prefill_s},
                   "decode": {"bytes": counter.decode_bytes, "steps": decode_steps, "seconds": decode_s}},
        "measured_s": measured_s,
        "model": session.loaded.name,
        "compute": reading.compute,
        "settings": resolved,
        "by_depth": {depth: statistics.fmean(hits) for depth, hits in by_depth.items()} if meaningful and by_depth else None,
        "by_kind": {kind: statistics.fmean(hits) for kind, hits in by_kind.items()} if meaningful and by_kind else None,
    }


def policy_readings(session: Session, samples: list[Sample], settings: ReadSettings) -> Iterator[Asked]:
    """Each sample read once (with its questions, for a policy that reads with them), every question asked of it."""
    for sample in samples:
        reading = session.read(sample.document, settings, force=True,
                               questions=[q.question for q in sample.questions])
        for i, question in enumerate(sample.questions):
            yield Asked(sample, question, reading, reading.document_text(), reading.document.tokens, i == 0, i == 0)


def full_cache_misfit(model, tokens: int, limit: int | None) -> str | None:
    """Why a full cache of `tokens` entries would not fit (a reason to skip), or None when it would."""
    need = full_cache_bytes(model, tokens)
    room = limit - weight_bytes(model) if limit is not None else available_memory(model.device)
    if need <= room:
        return None
    return f"would need {need / 2**30:.1f} GiB of KV cache; {max(room, 0) / 2**30:.1f} GiB free"


def warm_up(session: Session, settings: ReadSettings) -> None:
    """One short run through the same code paths (two chunks, so eviction runs too), left out of the figures."""
    prefix = prompt_layout(session.loaded.tokenizer).head_ids
    short = replace(settings, budget=len(prefix) + 16, stabilizers=4, chunk_size=16)
    text = "The warm-up text. " * (8 + len(prefix) // 4)  # longer than the budget, so eviction runs
    reading = session.read(text_document(text), short, force=True, questions=["Why?"])
    reading.ask("Why?", AnswerSettings(max_new_tokens=2), sources=0)


def main() -> None:
    spec = CellSpec(**json.loads(sys.stdin.read()))
    try:
        result = {"ok": run_cell(spec)}
    except LocretError as exc:
        result = {"error": str(exc)}
    except torch.OutOfMemoryError as exc:
        result = {"error": f"out of memory: {str(exc).splitlines()[0]}"}
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
