"""SmolLM2-135M-Instruct on dev documents of real prose it never trained on: accuracy per policy, length, kind and
depth, and what a 128K-token read costs.

Each document holds a pass key and code and person facts spread from 5% to 95% of its depth, in prose from the dev
packages (`prose.DEV_PACKAGES`, disjoint from training's). It is read once per policy (`Session.read`) and each
question is answered on a fork of the cache. Rows are appended to `--out` as they finish, and a rerun skips those
there, so a long run resumes where it stopped.

    python -m benchmarks.smollm2.evaluate --prose-packages runs/prose-packages --out runs/smollm2/dev.jsonl \\
        --runs 4000:full,4000:locret,32000:locret,128000:locret,32000:streaming ...
    python -m benchmarks.smollm2.evaluate --out runs/smollm2/dev.jsonl --report    # docs/measurements/smollm2.md
    python -m benchmarks.smollm2.evaluate --prose-packages runs/prose-packages --write 128000:0:dev-128k.txt

Policies: full, locret (the shipped heads), locret-untrained (fresh heads, seed 0: the control), streaming, snapkv,
h2o, finch (one read steered by all of a document's questions) and finch-each (one read per question). Settings are the ones recorded with the shipped heads, unless --budget etc. say otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path

import torch

from locret_cli.api import Session, load_session
from locret_cli.bench.scoring import contains_match
from locret_cli.core.heads import RetainingHeads
from recipes import prose
from recipes.smollm2 import documents

FACTS_PER_LENGTH = {4000: 4, 32000: 7, 128000: 11}
DOCUMENTS_PER_LENGTH = {4000: 6, 32000: 4, 128000: 4}
DEV_SEED = 50_000
DEPTH_BANDS = ((0.0, 0.35, "first third"), (0.35, 0.65, "middle third"), (0.65, 1.0, "last third"))


def dev_documents(paragraphs: list[str], length: int) -> list[documents.Document]:
    count, facts = DOCUMENTS_PER_LENGTH.get(length, 2), FACTS_PER_LENGTH.get(length, 6)
    out = []
    for index in range(count):
        seed = DEV_SEED + length + index
        out.append(documents.build(paragraphs, length, documents.facts_for(random.Random(seed), facts), seed))
    return out


def policy_session(session: Session, policy: str) -> Session:
    if policy == "locret-untrained":
        torch.manual_seed(0)
        heads = RetainingHeads.for_model(session.loaded.model, session.heads.hidden).eval()
        return Session(session.loaded, heads)
    loaded = session.loaded
    return Session(replace(loaded, defaults={**loaded.defaults, "policy": policy.removesuffix("-each")}), session.heads)


def readings(runner: Session, path: str, settings, policy: str, questions: list[str], defer: bool = False):
    """(question, reading) pairs: one read for all of a document's questions (under finch, read with them all,
    as `batch --questions` reads), or, for a "-each" policy, one read per question (as `ask FILE QUESTION`).
    `defer`: the bounded read runs only for an answer that needs it, as `locret ask` does."""
    if policy.endswith("-each"):
        for question in questions:
            yield question, runner.read(path, settings, questions=[question], defer=defer)
        return
    reading = runner.read(path, settings, questions=questions, defer=defer)
    for question in questions:
        yield question, reading


def run(session: Session, length: int, policy: str, paragraphs: list[str], out: Path, overrides: dict,
        answer: dict, documents_limit: int | None = None, defer: bool = False) -> None:
    done = {(r["length"], r["policy"], r["document"]) for r in read_rows(out)}
    runner = policy_session(session, policy)
    settings, answering = runner.plan(read={**overrides}).read, runner.plan(answer={"max_new_tokens": 32, **answer}).answer
    for index, document in enumerate(dev_documents(paragraphs, length)[:documents_limit]):
        if (length, policy, index) in done:
            continue
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(document.text)
        rows, read_s = [], 0.0
        pairs = readings(runner, f.name, settings, policy, [fact.question for fact in document.facts], defer)
        for (question, reading), fact, depth in zip(pairs, document.facts, document.depths):
            result = reading.ask(question, answering)
            read_s = reading.read_s
            rows.append({"length": length, "policy": policy, "document": index, "tokens": result.document.tokens,
                         "kind": fact.kind, "depth": round(depth, 3), "question": fact.question,
                         "expected": fact.answer, "answer": result.answer,
                         "correct": contains_match(result.answer, fact.answer),
                         "settings": asdict(settings), "answering": asdict(answering),
                         "reread": None if result.windows is None else [w.to_json() for w in result.windows],
                         "read_for": list(result.read_for),
                         "read_s": result.speed.read_s, "holds_document": result.kv_cache.holds_document,
                         "pruned_tokens": reading.engine.pruned_tokens,
                         "time_to_first_token_s": result.speed.time_to_first_token_s,
                         "decode_tokens_per_s": result.speed.decode_tokens_per_s,
                         "memory_peak_bytes": result.memory.peak_bytes, "finished_at": time.time()})
        Path(f.name).unlink()
        with out.open("a") as log:
            log.writelines(json.dumps(row) + "\n" for row in rows)
        right = sum(r["correct"] for r in rows)
        print(f"{policy} {length} doc {index}: {right}/{len(rows)} in {read_s:.0f} s read", flush=True)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def percent(rows: list[dict]) -> str:
    if not rows:
        return "–"
    right = sum(r["correct"] for r in rows)
    return f"{100 * right / len(rows):.0f}% ({right}/{len(rows)})"


def report(rows: list[dict]) -> str:
    """Markdown tables: accuracy by policy and length, by kind; then by depth band."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["policy"], row["length"])].append(row)
    lines = ["| policy | document tokens | all | pass key | code | person |", "|---|---:|---:|---:|---:|---:|"]
    for (policy, length), group in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        kinds = [percent([r for r in group if r["kind"] == kind]) for kind in ("passkey", "code", "person")]
        lines.append(f"| {policy} | {length:,} | {percent(group)} | " + " | ".join(kinds) + " |")
    lines += ["", "| policy | document tokens | " + " | ".join(b[2] for b in DEPTH_BANDS) + " |",
              "|---|---:|" + "---:|" * len(DEPTH_BANDS)]
    for (policy, length), group in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        bands = [percent([r for r in group if low <= r["depth"] < high]) for low, high, _ in DEPTH_BANDS]
        lines.append(f"| {policy} | {length:,} | " + " | ".join(bands) + " |")
    lines += ["", "| policy | document tokens | read (median) | time to first token (median) | peak RSS (max) |",
              "|---|---:|---:|---:|---:|"]
    for (policy, length), group in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        reads = statistics.median(r["read_s"] for r in group)
        first = statistics.median(r["time_to_first_token_s"] for r in group)
        peak = max(r["memory_peak_bytes"] for r in group) / 2**30
        lines.append(f"| {policy} | {length:,} | {reads:.0f} s | {first:.0f} s | {peak:.2f} GiB |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prose-packages", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", default="", help="comma-separated LENGTH:POLICY pairs")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--load-8bit", action="store_true", help="the model's linear weights in int8")
    for setting in ("budget", "chunk-size", "stabilizers", "score-pool", "span", "kv-bits"):
        parser.add_argument(f"--{setting}", type=int, help="a read setting other than the model's recorded one")
    for setting in ("reread", "reread-tokens", "stop-repeats"):
        parser.add_argument(f"--{setting}", type=int, help="an answer setting other than the model's recorded one")
    parser.add_argument("--lazy-after", type=int, help="lazy prefill: prune after this many layers")
    parser.add_argument("--lazy-share", type=float, help="lazy prefill: at most this share of a chunk pruned")
    parser.add_argument("--locate", choices=("attention", "words", "both"), help="what names the re-read windows")
    parser.add_argument("--defer", action="store_true", help="run the bounded read only for answers that need it")
    parser.add_argument("--documents", type=int, help="only the first N documents of each length")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--write", metavar="LENGTH:INDEX:PATH", help="write one dev document and its questions")
    args = parser.parse_args()
    if args.write:
        length, index, path = args.write.split(":", 2)
        paragraphs = prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages)
        document = dev_documents(paragraphs, int(length))[int(index)]
        Path(path).write_text(document.text)
        Path(path).with_suffix(".questions.jsonl").write_text("".join(
            json.dumps({"question": f.question, "expected": f.answer}) + "\n" for f in document.facts))
    if args.runs:
        paragraphs = prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages)
        session = load_session(args.model, device="cpu", dtype="bf16", load_8bit=args.load_8bit)
        overrides = {name: getattr(args, name) for name in ("budget", "chunk_size", "stabilizers", "score_pool", "span",
                                                            "kv_bits", "lazy_after", "lazy_share")
                     if getattr(args, name) is not None}
        for pair in args.runs.split(","):
            length, policy = pair.split(":")
            answer = {name: getattr(args, name) for name in ("reread", "reread_tokens", "stop_repeats", "locate")
                      if getattr(args, name) is not None}
            run(session, int(length), policy, paragraphs, args.out, overrides, answer, args.documents, args.defer)
    if args.report:
        print(report(read_rows(args.out)))


if __name__ == "__main__":
    main()
