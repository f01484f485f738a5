"""A model's answers by route, with its reader and without, from one read per document.

Each document is read once (`Session.read`, the shipped heads and recorded settings unless --budget says otherwise)
and every question is asked of that one read under each configuration:

    one-read          --reread 0 --reader off: the bounded cache alone, as the model reads it untrained
    one-read+reader   --reread 0: the bounded cache, read with the reader
    windows           the recorded route (re-read windows the question's words locate, else the bounded cache),
                      with no reader: what shipped before the reader
    windows+reader    the same, with the bounded cache read with the reader where no window is located
    two-hops+reader   windows+reader with `--hops 2`: the first answer's words locate more windows
    fallback+reader   windows+reader with `--fallback unspecific`: the bounded cache (with the reader) answers
                      too when the windows' answer names nothing the document holds, and is shown if its answer does
    unstated+reader   the same with `--fallback unstated`: the bounded cache answers too when the document does not
                      state the windows' answer in a sentence naming all the question names, and is shown if it
                      states the cache's answer (or holds it, where the windows' answer names nothing it holds)
    words-route       --reread 1 --locate words, with no reader, whatever the model's recorded settings say
    words-unstated    words-route with `--fallback unstated`: the bounded cache answers too, as unstated+reader
                      says, with no reader
    attention-route   --reread 1 --locate attention, with no reader: the window where the bounded cache's first
                      answer looked is read again whole
    both-route        --reread 1 --locate both, with no reader: the window where that attention and the question's
                      words, each as shares of its own total, add up highest
    bm25-route        --reread 1 --locate bm25, with no reader: the window centred on the passage whose words best
                      match the question's (BM25)
    bm25-4x256        --reread 4 --reread-tokens 256 --locate bm25: four small windows, as a retrieval pipeline's
                      top passages
    bm25-3x1024       --reread 3 --locate bm25: three windows of 1,024 tokens
    bm25-5x1024       --reread 5 --locate bm25: five windows of 1,024 tokens
    attention-3x1024  --reread 3 --locate attention: three windows of 1,024 tokens where the bounded cache's first
                      answer looked (with `--question-share`, a cache the questions chose)
    bm25-3x1024-say   bm25-3x1024 with `--say-unstated`: the prompt asks for "The document does not say." where the
                      windows do not answer
When every configuration asked locates in the text alone (words, bm25), the bounded read runs only for a question
that locates no window.

Every answer is checked as `--strict` checks it, and reported three ways: CONFIG is what the model said,
CONFIG+strict what `--strict` shows ("The document does not say." where grounding withholds it), and CONFIG+refuse
what `--refuse-unfound` shows (withheld only where some specific word of it is nowhere in the document); an answer
from re-read windows also as CONFIG+wrefuse, withheld where some specific word of it is nowhere in those windows
and the question (`--unfound-in read`).

Sets: `dev` (`evaluate.py`'s dev documents: pass keys, codes and people in prose of the dev packages), `kinds`
(`locret bench --tasks kinds`: one question of each kind per document, in the Paul Graham essays) and `natural` or
`natural-validation` (`locret bench --tasks natural`'s halves; their documents have their own lengths, so
--lengths names the rows only; given both, each document is read once for the two). Rows go to --out
as each document finishes; a rerun skips the configurations a document has rows for (--configs picks some).

    python -m benchmarks.reader_routes --out runs/reader-routes.jsonl --sets dev,kinds --lengths 32000 \\
        --documents 4
    python -m benchmarks.reader_routes --out runs/reader-routes.jsonl --report

`--candidate DIR` asks every configuration that has a reader a second time of the same read, with the reader in
DIR, as `...+candidate` (two readers compared for the price of one read per document).
`--model gemma3-270m` measures Gemma 3 270M the same way (it has no reader: the configurations without one).
`--oracle fact+heads` or `fact+recent` reads each dev document with a fact-kept oracle (`fact_oracles.py`), and
`--oracle passage+heads` each natural document with every asked question's passage kept (`passage_oracle.py`); rows
name it as their policy; `--budget`, `--span` and `--lazy-after` change the read's settings, and `--load-8bit` loads
int8 weights. Give each variant its own --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from benchmarks.smollm2.fact_oracles import ORACLES, fact_oracle
from benchmarks.smollm2.passage_oracle import passage_oracle
from locret_cli.api import Session, load_session
from locret_cli.api.answer_checks import read_text, unfound
from locret_cli.bench.scoring import contains_match
from locret_cli.bench.tasks import NATURAL, Question, kinds_samples, natural_samples
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground
from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.core.measure import peak_memory
from locret_cli.inputs.documents import text_document
from locret_cli.models.loading import DTYPES
from locret_cli.models.reader_files import load_reader
from locret_cli.models.shipped import find_shipped
from locret_cli.settings import TEXT_LOCATES
from recipes import prose

CONFIGS = {  # name: (answer settings changed, with the reader)
    "one-read": ({"reread": 0}, False), "one-read+reader": ({"reread": 0}, True), "windows": ({}, False),
    "windows+reader": ({}, True), "two-hops+reader": ({"hops": 2}, True),
    "fallback+reader": ({"fallback": "unspecific"}, True),
    "unstated+reader": ({"fallback": "unstated"}, True),
    "words-route": ({"reread": 1, "locate": "words"}, False),
    "words-unstated": ({"reread": 1, "locate": "words", "fallback": "unstated"}, False),
    "attention-route": ({"reread": 1, "locate": "attention"}, False),
    "both-route": ({"reread": 1, "locate": "both"}, False),
    "bm25-route": ({"reread": 1, "locate": "bm25"}, False),
    "bm25-4x256": ({"reread": 4, "reread_tokens": 256, "locate": "bm25"}, False),
    "bm25-3x1024": ({"reread": 3, "locate": "bm25"}, False),
    "bm25-5x1024": ({"reread": 5, "locate": "bm25"}, False),
    "attention-3x1024": ({"reread": 3, "locate": "attention"}, False),
    "bm25-3x1024-say": ({"reread": 3, "locate": "bm25", "say_unstated": True}, False)}
PASSAGE_KEPT = "passage+heads"


def dev_questions(length: int, count: int, packages: Path | None) -> list[tuple[object, list[Question], list[str]]]:
    """(document, its questions, its facts' sentences) for the first `count` dev documents of `length` tokens."""
    from benchmarks.smollm2.evaluate import dev_documents

    paragraphs = prose.paragraphs(prose.DEV_PACKAGES, packages)
    return [(text_document(d.text, f"dev-{length}-{i}"), [Question(f.question, f.answer, kind=f.kind, candidates=tuple(
        o.answer for o in d.facts if o.answer != f.answer)) for f in d.facts], [f.statement for f in d.facts])
        for i, d in enumerate(dev_documents(paragraphs, length)[:count])]


def kinds_questions(session: Session, length: int, count: int) -> list[tuple[object, list[Question], list[str]]]:
    return [(s.document, s.questions, []) for s in kinds_samples(session.loaded.tokenizer, length, count)]


def add_dtype(parser: argparse.ArgumentParser) -> None:
    """The `--dtype` the natural task's benchmarks and replays load their model with: auto (the dtype probe's
    choice: bf16 where this CPU is fast at it, else fp32) or one of `loading.DTYPES`."""
    parser.add_argument("--dtype", default="auto", choices=("auto", *DTYPES),
                        help="the compute dtype (auto: bf16 where this CPU is fast at it)")


def natural_questions(split: str, count: int) -> list[tuple[object, list[Question], list[str]]]:
    """The natural task's first `count` documents, with their questions of `split`; they have their own lengths."""
    return [(s.document, s.questions, []) for s in natural_samples(split)[:count]]


def run(session: Session, policy: str, sets: list[str], lengths: list[int], count: int, out: Path,
        packages: Path | None, overrides: dict, chosen: list[str], oracle: str | None = None,
        candidate: ReaderAdapter | None = None, only: set[str] | None = None) -> None:
    label = oracle or policy
    done = {(r["set"], r["length"], r["policy"], r["document"], r["config"]) for r in read_rows(out)}
    reader = session.reader
    runner = Session(replace(session.loaded, defaults={**session.loaded.defaults, "policy": policy}), session.heads,
                     reader)
    settings = runner.plan(read={**overrides}).read
    base = runner.plan(answer={"max_new_tokens": 32}).answer
    wanted = {n: (c, reader if with_reader else None) for n, (c, with_reader) in CONFIGS.items()
              if (not with_reader or reader is not None) and n in chosen}
    if candidate is not None:
        wanted |= {n.replace("+reader", "+candidate"): (c, candidate) for n, (c, r) in wanted.items() if r}
    for length in lengths:
        for index, document, statements, asked in reads(session, sets, length, count, packages, only):
            todo = {name: {n: c for n, c in wanted.items() if (name, length, label, index, n) not in done}
                    for name in asked}
            asked = {name: questions for name, questions in asked.items() if todo[name]}
            if not asked:
                continue
            keeper = (passage_oracle(runner, document, [q for name in asked for q in asked[name]], settings)
                      if oracle == PASSAGE_KEPT else fact_oracle(oracle, runner, document, statements, settings)
                      if oracle else None)
            every = [q.question for name in asked for q in asked[name]]  # a policy that reads with the questions
            defer = all(wanted[n][0].get("locate") in TEXT_LOCATES and "fallback" not in wanted[n][0] for n in wanted)
            reading = runner.read(document, settings, force=True, policy=keeper, questions=every,  # (finch) gets all
                                  defer=defer and keeper is None)
            for name, questions in asked.items():
                rows = []
                for question in questions:
                    for config, (changed, config_reader) in todo[name].items():
                        reading.engine = reading.engine.with_reader(config_reader)
                        answering = replace(base, **changed, strict=True)  # the model's answer is kept
                        result = reading.ask(question.question, answering, sources=0)
                        read = (read_text(reading, result.windows, question.question) if result.route == "windows"
                                else None)
                        rows.append({"set": name, "length": length, "policy": label, "document": index,
                                     "config": config, **answer_views(question, result, reading.document_text(), read),
                                     "route": result.route, "tokens": result.document.tokens,
                                     "holds_document": result.kv_cache.holds_document,
                                     "read_s": reading.read_s,
                                     "time_to_first_token_s": result.speed.time_to_first_token_s - reading.read_s,
                                     "peak_bytes": peak_memory(session.loaded.model.device)[0],
                                     "settings": {"budget": settings.budget, "chunk_size": settings.chunk_size,
                                                  "stabilizers": settings.stabilizers, "span": settings.span,
                                                  "lazy_after": settings.lazy_after,
                                                  "question_share": settings.question_share},
                                     "finished_at": time.time()})
                with out.open("a") as log:
                    log.writelines(json.dumps(row) + "\n" for row in rows)
                right = defaultdict(int)
                for row in rows:
                    right[row["config"]] += row["correct"]
                print(f"{name} {length} {label} doc {index} ({reading.read_s:.0f} s read): " +
                      ", ".join(f"{c} {right[c]}/{len(questions)}" for c in todo[name]), flush=True)
            reading = result = keeper = None  # else this read's cache is held while the next document is read


def answer_views(question: Question, result, text, read: DocumentText | None = None) -> dict:
    """A strict answer's row fields, judged against `text`: as said (the answer grounding withheld, if any), as
    `--strict` shows it and as `--refuse-unfound` shows it; with `read` (the windows the answer read), also withheld
    where some specific word of it is nowhere in them and the question (`wrefuse`: as `--refuse-unfound
    --unfound-in read` shows it)."""
    said = result.grounding.withheld or result.answer  # what --no-strict shows
    refused = REFUSAL if unfound(result.grounding.verdict) else said  # --refuse-unfound
    verdict = question.verdict(said, text)
    views = {"kind": question.kind, "question": question.question, "expected": [question.answer, *question.parts],
             "answer": said, "correct": verdict == "right", "verdict": verdict, "strict_answer": result.answer,
             "strict_verdict": question.verdict(result.answer, text), "refuse_answer": refused,
             "refuse_verdict": question.verdict(refused, text)}
    if read is not None:
        withheld = REFUSAL if unfound(ground(question.question, said, read)) else said
        views |= {"wrefuse_answer": withheld, "wrefuse_verdict": question.verdict(withheld, text)}
    return views


def reads(session: Session, sets: list[str], length: int, count: int, packages: Path | None,
          only: set[str] | None = None) -> list[tuple]:
    """Each document to read once: (index, document, its facts' sentences, {set: its questions}), of the documents
    named in `only` where given. The natural task's halves ask the same documents, so one read serves both."""
    grouped = {}
    for name in sets:
        if name in NATURAL:
            docs = natural_questions(NATURAL[name], count)
        else:
            docs = dev_questions(length, count, packages) if name == "dev" else kinds_questions(session, length,
                                                                                               count)
        for index, (document, questions, statements) in enumerate(docs):
            if only and document.name not in only:
                continue
            key = ("natural" if name in NATURAL else name, index)
            grouped.setdefault(key, (index, document, statements, {}))[3][name] = questions
    return list(grouped.values())


def read_rows(path: Path) -> list[dict]:
    """The rows of `path`, and for each row with a strict answer a `CONFIG+strict` row: what --strict shows for the
    same answer (and `CONFIG+refuse`: what --refuse-unfound shows, where recorded). Rows without a verdict (written
    before scoring checked binding) are scored again from their answer by `contains_match`."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    rows = [{**row, "correct": row["verdict"] == "right" if "verdict" in row else all(
        contains_match(row["answer"], value) for value in row["expected"])} for row in rows]
    return rows + [{**row, "config": row["config"] + "+strict", "answer": row["strict_answer"],
                    "verdict": row["strict_verdict"], "correct": row["strict_verdict"] == "right"}
                   for row in rows if "strict_verdict" in row] + [
        {**row, "config": row["config"] + f"+{view}", "answer": row[f"{view}_answer"],
         "verdict": row[f"{view}_verdict"], "correct": row[f"{view}_verdict"] == "right"}
        for view in ("refuse", "wrefuse") for row in rows if f"{view}_verdict" in row]


def report(rows: list[dict]) -> str:
    groups = defaultdict(list)
    for row in rows:
        groups[(row["set"], row["length"], row["policy"], row["config"])].append(row)
    kinds = sorted({row["kind"] for row in rows})
    lines = ["| set | tokens | policy | configuration | right | made up | bound wrong | read | peak RSS | "
             + " | ".join(kinds) + " |", "|---|---:|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(kinds)]
    for (name, length, policy, config), group in sorted(groups.items()):
        cells = [share([r for r in group if r["kind"] == kind]) for kind in kinds]
        wrong = [sum(r.get("verdict") == v for r in group) for v in ("made_up", "bound_wrong")]
        read = statistics.median(r["read_s"] for r in group)
        peak = max(r["peak_bytes"] for r in group) / 2**30
        lines.append(f"| {name} | {length:,} | {policy} | {config} | {share(group)} | {wrong[0]} | {wrong[1]} | "
                     f"{read:.0f} s | {peak:.2f} GiB | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def share(rows: list[dict]) -> str:
    if not rows:
        return "–"
    right = sum(r["correct"] for r in rows)
    return f"{100 * right / len(rows):.0f}% ({right}/{len(rows)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="smollm2")
    add_dtype(parser)
    parser.add_argument("--sets", default="dev,kinds")
    parser.add_argument("--lengths", default="32000")
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--policy", default="locret", help="locret, or full for the ceiling")
    parser.add_argument("--oracle", choices=(*ORACLES, PASSAGE_KEPT), help="a fact-kept oracle (fact_oracles.py), "
                        f"dev set only, or {PASSAGE_KEPT} (passage_oracle.py), natural sets only; "
                        "rows name it as their policy")
    parser.add_argument("--reader", help="a reader directory (default: the one shipped with the model)")
    parser.add_argument("--candidate", help="a second reader directory, asked as `...+candidate` configurations")
    parser.add_argument("--heads", help="other heads than the shipped ones (read with the global defaults where "
                        "--budget and the rest say nothing)")
    parser.add_argument("--shipped-settings", action="store_true",
                        help="with --heads: read and answer with the settings recorded with the shipped heads")
    parser.add_argument("--budget", type=int)
    parser.add_argument("--chunk-size", type=int)
    parser.add_argument("--stabilizers", type=int)
    parser.add_argument("--span", type=int, help="keep entries in blocks of this many tokens (--span)")
    parser.add_argument("--lazy-after", type=int, help="lazy prefill above this many layers (--lazy-after)")
    parser.add_argument("--question-share", type=float, help="the share of the budget kept by the questions' "
                        "attention (--question-share): each document is read for all the questions asked of it")
    parser.add_argument("--load-8bit", action="store_true", help="int8 weights (--load-8bit)")
    parser.add_argument("--prose-packages", type=Path, default=Path("runs/prose-packages"))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="the configurations to run")
    parser.add_argument("--only", help="read only these documents (names, comma-separated; rows keep their index)")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if not args.report:
        policy = "locret" if args.oracle in ("fact+heads", PASSAGE_KEPT) else args.policy
        session = load_session(args.model, device="cpu", dtype=args.dtype, reader=args.reader, heads=args.heads,
                               load_8bit=args.load_8bit, reads_with=policy)
        if args.shipped_settings:
            shipped = find_shipped(session.loaded.model)
            if shipped is None:
                parser.error(f"--shipped-settings: no heads are shipped for {args.model}")
            session = Session(replace(session.loaded, defaults=shipped.defaults), session.heads, session.reader)
        given = (("budget", args.budget), ("chunk_size", args.chunk_size), ("stabilizers", args.stabilizers),
                 ("span", args.span), ("lazy_after", args.lazy_after), ("question_share", args.question_share))
        overrides = dict(given)  # read_settings ignores the ones not given (None)
        if args.oracle == PASSAGE_KEPT and not set(args.sets.split(",")) <= set(NATURAL):
            parser.error(f"--oracle {PASSAGE_KEPT} needs the answers' places: --sets natural or natural-validation")
        if args.oracle in ORACLES and args.sets != "dev":
            parser.error("--oracle needs the facts' sentences: --sets dev")
        run(session, args.policy, args.sets.split(","), [int(n) for n in args.lengths.split(",")],
            args.documents, args.out, args.prose_packages, overrides, args.configs.split(","), args.oracle,
            load_reader(args.candidate, session.loaded.model) if args.candidate else None,
            set(args.only.split(",")) if args.only else None)
    print(report(read_rows(args.out)))


if __name__ == "__main__":
    main()
