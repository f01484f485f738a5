"""Can a reader learn to answer from SmolLM2's own bounded caches? Fit a few documents, then measure one bounded
read's answers (`--reread 0`) before and after, on those documents and on dev documents it never saw.

    python -m research.smollm2.reader_fit --out runs/reader-fit --documents 20 --tokens 8000 --budget 1024 --steps 300

Reads are saved under OUT (the trainer's `reads/`, and `dev-reads/`), so a rerun skips them; rows go to
OUT/answers.jsonl.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import replace
from pathlib import Path

from locret_cli.api import load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.bench.scoring import contains_match
from locret_cli.inputs.documents import text_document
from locret_cli.training.reader_trainer import ReaderConfig, ReaderTrainer, load_reader_records
from recipes import prose
from recipes.smollm2 import reader_data
from recipes.smollm2.heads_data import replied_value


def dev_records(count: int, tokens: int, packages: Path | None) -> list[dict]:
    paragraphs = prose.paragraphs(prose.DEV_PACKAGES, packages)
    rng = random.Random(70_000 + tokens)
    return [reader_data.record(paragraphs, tokens, rng, facts=(4, 4)) for _ in range(count)]


def accuracy(readings, records, reader, label: str, log) -> float:
    right = total = 0
    for reading, record in zip(readings, records):
        reading.engine = reading.engine.with_reader(reader)
        answering = replace(reading.answering, reread=0, max_new_tokens=32)
        for item in record["questions"]:
            answer = reading.ask(item["question"], answering, sources=0).answer
            expected = replied_value(item["answer"])
            ok = contains_match(answer, expected)
            right, total = right + ok, total + 1
            log.write(json.dumps({"set": label, "question": item["question"], "expected": expected,
                                  "answer": answer, "correct": ok}) + "\n")
    log.flush()
    return right / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prose-packages", type=Path, default=Path("runs/prose-packages"))
    parser.add_argument("--documents", type=int, default=20)
    parser.add_argument("--dev-documents", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=8000)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "train.jsonl"
    if not data.exists():
        paragraphs = prose.paragraphs(prose.MODEL_PACKAGES)
        reader_data.write(paragraphs, data, [reader_data.Batch(args.documents, (args.tokens, args.tokens))], seed=1)
    session = load_session("smollm2", device="cpu", dtype="bf16")
    share = args.budget / args.tokens
    config = ReaderConfig(steps=args.steps, rank=args.rank, lr=args.lr, kept_share=(share, share), uncut_share=0.0,
                          save_every=50)
    trainer = ReaderTrainer(session, load_reader_records(data), args.out, config)
    started = time.perf_counter()
    trainer.prepare_reads(lambda done, total: print(f"read {done}/{total}", flush=True))
    print(f"reads: {time.perf_counter() - started:.0f} s", flush=True)
    records = [json.loads(line) for line in data.read_text().splitlines()]
    dev = dev_records(args.dev_documents, args.tokens, args.prose_packages)
    dev_dir = args.out / "dev-reads"
    dev_dir.mkdir(exist_ok=True)
    settings = session.plan(read={"budget": trainer.budget_for(0, args.tokens)}).read
    for i, record in enumerate(dev):
        path = dev_dir / f"{i:04d}.locret"
        if not path.exists():
            document = text_document(record["document"], f"dev {i}")
            save_reading(session.read(document, settings, force=True), path, session.heads)
    train_readings = [trainer.reading(i) for i in range(len(records))]
    dev_readings = [session.open(str(dev_dir / f"{i:04d}.locret")) for i in range(len(dev))]
    log = (args.out / "answers.jsonl").open("a")
    resumed = trainer.resume()
    if not resumed:
        print(f"before: fitted {accuracy(train_readings, records, None, 'fit-before', log):.3f} "
              f"dev {accuracy(dev_readings, dev, None, 'dev-before', log):.3f}", flush=True)
    summary = trainer.train(lambda r: r.step % 20 == 0 and print(
        f"step {r.step}/{r.steps} loss {r.loss:.3f} {r.seconds:.0f} s", flush=True))
    trainer.reader.eval()
    trainer.save({"model": "smollm2"})
    print(f"trained {summary.steps} steps in {summary.seconds:.0f} s, final loss {summary.final_loss:.3f}")
    print(f"after: fitted {accuracy(train_readings, records, trainer.reader, 'fit-after', log):.3f} "
          f"dev {accuracy(dev_readings, dev, trainer.reader, 'dev-after', log):.3f}", flush=True)


if __name__ == "__main__":
    main()
