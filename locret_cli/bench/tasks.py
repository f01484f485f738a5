"""What a benchmark asks: documents of a chosen length, each with its questions and their answers.

    needle   the official pass key ("The pass key is <digits>. Remember it.") at depths spread over 0-100%
    facts    several "The <attribute> of <entity> is <value>." statements, every one of them asked
    niah     the field's needle in a haystack: the San Francisco needle in the Paul Graham essays at depths 0, 10, ...,
             100% (`haystack.py`), one document per depth, whatever --samples says
    kinds    one question of each kind of `kinds.py` per document (facts, facts in other words, near-miss
             distractors, a pass key among common words, two hops, three facts at once), in the essays
    natural  questions as users ask them over long real documents (`natural.py`), the test half; their documents
             have their own lengths, so --lengths and --samples do not apply. `natural-validation` asks the
             validation half, the one settings may be tuned on
    --data   the user's JSONL: {"context": text or a path to a .pdf/.txt, "question": ..., "answer": ...}, and
             optionally "alternatives" (other accepted forms of the answer) and "candidates" (the document's values
             for other things): answers are scored by `scoring.py`

Generated documents use the held-out ("dev") vocabulary and filler of `synthetic.py`, and seeds of their own, so a
model trained on the "train" side never saw them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from locret_cli.bench import haystack, kinds
from locret_cli.bench.generated import document_text
from locret_cli.bench.scoring import contains_match, normalise, verdict
from locret_cli.bench.synthetic import novel_fact, passkey_fact
from locret_cli.errors import SettingError
from locret_cli.inputs.documents import Document, open_document, text_document
from locret_cli.inputs.jsonl import jsonl_records
from locret_cli.inputs.tokenizer import encode_text

NATURAL = {"natural": "test", "natural-validation": "validation"}  # task: the half it asks
TASKS = ("needle", "facts", "niah", "kinds", *NATURAL)
BENCH_SEED = 20_000
FACTS_PER_DOCUMENT = 4
ANSWER_TOKENS = {"niah": 64, **dict.fromkeys(NATURAL, 48)}  # answers a sentence long ("... sit in Dolores Park ...")


def answer_tokens(task: str) -> int:
    """The longest answer a task's questions need, in tokens, where --max-new-tokens is not given."""
    return ANSWER_TOKENS.get(task, 16)


@dataclass(frozen=True)
class Question:
    question: str
    answer: str
    sentence: str | None = None  # the answer as a full statement ("The pass key is 4821."): exact too
    kind: str | None = None  # the `kinds` task's kind of question
    parts: tuple[str, ...] = ()  # values an answer must all hold (several facts asked at once), besides `answer`
    alternatives: tuple[str, ...] = ()  # other accepted forms of `answer` ("30 seconds" for "30")
    candidates: tuple[str, ...] = ()  # the document's values for other things, which the question could be mistaken for
    depth: float | None = None  # where the answer is, as a fraction of the document's characters, where the task says

    def is_exact(self, answer: str) -> bool:
        """Whether `answer` is the expected answer, or the statement that ends in it (as the embedded model
        answers), case, surrounding whitespace and full stops aside; with `parts`, whether it holds them all."""
        if self.parts:
            return self.contained_in(answer)
        return any(exact_match(answer, expected) for expected in (self.answer, self.sentence) if expected)

    def contained_in(self, answer: str) -> bool:
        """Whether `answer` holds the expected answer (and every one of `parts`), case and spacing aside."""
        return all(contains_match(answer, expected) for expected in (self.answer, *self.parts))

    def verdict(self, answer: str, text=None) -> str:
        """right, bound_wrong, made_up or none (`scoring.py`); `text` is the document's DocumentText. An empty
        `answer` field means the document does not answer the question."""
        parts = [(self.answer, *self.alternatives)] if self.answer else []
        return verdict(answer, parts + [(part,) for part in self.parts], self.candidates, text, self.question)


@dataclass
class Sample:
    """One document and the questions asked of it (each on its own copy of the cache after one read)."""

    document: Document
    questions: list[Question]
    depth: float | None = None  # where the needle sits, for `needle`


def needle_depths(samples: int) -> list[float]:
    """`samples` depths spread evenly from 0 to 1 (0.5 for a single sample)."""
    return [0.5] if samples == 1 else [i / (samples - 1) for i in range(samples)]


def generated_samples(task: str, tokenizer, length: int, samples: int) -> list[Sample]:
    """`samples` documents of about `length` tokens for task `needle` or `facts`, the same on every run."""
    if task not in TASKS:
        raise SettingError("unknown task {task!r}; choose " + ", ".join(TASKS) + ", or pass {data} FILE", task=task)
    if task in NATURAL:
        return natural_samples(NATURAL[task])
    if task == "niah":
        text = haystack.essays()
        return [Sample(text_document(haystack.haystack_with_needle(tokenizer, text, length, depth), f"niah-{depth}"),
                       [Question(haystack.QUESTION, haystack.ANSWER)], depth) for depth in haystack.DEPTHS]
    if task == "kinds":
        return kinds_samples(tokenizer, length, samples)
    out = []
    for index, depth in enumerate(needle_depths(samples)):
        rng = random.Random(BENCH_SEED + 7919 * length + 31 * index + (0 if task == "needle" else 1))
        if task == "needle":
            facts = [passkey_fact(rng)]
            text = document_text(tokenizer, rng, length, facts, "dev", depths=[depth])
        else:
            facts = list({f.question: f for f in (novel_fact(rng, "dev") for _ in range(FACTS_PER_DOCUMENT))}.values())
            text, depth = document_text(tokenizer, rng, length, facts, "dev"), None
        values = [f.answer for f in facts]
        out.append(Sample(text_document(text), [Question(f.question, f.answer, f.reply, candidates=tuple(
            v for v in values if v != f.answer)) for f in facts], depth))
    return out


def kinds_samples(tokenizer, length: int, samples: int) -> list[Sample]:
    """`samples` documents of about `length` tokens of the essays, each with one question of every kind."""
    ids = encode_text(tokenizer, haystack.essays())
    per_char = len(ids) / max(len(tokenizer.decode(ids)), 1)
    common = len(encode_text(tokenizer, kinds.COMMON_WORDS[0] + " ")) * length / per_char / kinds.COMMON_EVERY
    out = []
    for index in range(samples):
        rng = random.Random(BENCH_SEED + 7919 * length + 31 * index + 2)
        placed = kinds.questions_for(rng, kinds.kind_depths(index, samples))
        sentences = [s for p in placed for s in p.sentences]
        own = sum(len(encode_text(tokenizer, sentence + " ")) for _, sentence in sentences)
        wanted = max(length - own - round(common), 1)  # room for the sentences put in
        text = tokenizer.decode(haystack.cycled(ids, wanted))
        body = kinds.with_sentences(text, sentences, rng)
        questions = [Question(p.question, p.values[0], kind=p.kind, parts=p.values[1:],
                              candidates=candidates(p, placed)) for p in placed]
        out.append(Sample(text_document(body, f"kinds-{index}"), questions))
    return out


def candidates(asked: kinds.Placed, placed: list[kinds.Placed]) -> tuple[str, ...]:
    """The values a `kinds` document states for anything but `asked`: the other questions' values and the
    distractors beside them (a sentence's last word, where it is not one of `asked`'s own values)."""
    numbers = {word for p in placed for _, sentence in p.sentences for word in sentence.rstrip(".").split()
               if word.isdigit()}
    return tuple(sorted((numbers | {v for p in placed for v in p.values}) - set(asked.values)))


def natural_samples(split: str) -> list[Sample]:
    """The natural task's documents, each with its questions of `split`."""
    from locret_cli.bench import natural

    return [Sample(text_document(d.text, d.name), [
        Question(q.question, q.answer, kind=q.kind, alternatives=q.alternatives, candidates=q.candidates,
                 depth=q.depth) for q in d.questions]) for d in natural.load(split)]


def data_samples(path: str | Path) -> list[Sample]:
    """Samples from a JSONL file of {"context", "question", "answer"}; a context naming an existing .pdf or .txt file
    (relative to the JSONL's folder) is read from that file."""
    path = Path(path)
    if not path.is_file():
        raise SettingError("{data} {path}: no such file", path=path)
    out = []
    for number, record in jsonl_records(path.read_text(encoding="utf-8").splitlines(), f"--data {path}"):
        if not isinstance(record, dict):
            raise SettingError("{data} {path} line {number}: not a JSON object", path=path, number=number)
        missing = [k for k in ("context", "question", "answer") if not isinstance(record.get(k), str)]
        if missing:
            raise SettingError("{data} {path} line {number}: needs string field(s) {missing}", path=path, number=number,
                               missing=", ".join(missing))
        context = record["context"]
        linked = (path.parent / context) if len(context) < 4096 and "\n" not in context else None
        if linked is not None and linked.suffix.lower() in (".pdf", ".txt") and linked.is_file():
            document = open_document(str(linked))
        else:
            document = text_document(context, name=f"{path.name}:{number}")
        lists = {k: record.get(k, []) for k in ("alternatives", "candidates")}
        if any(not isinstance(v, list) or not all(isinstance(x, str) for x in v) for v in lists.values()):
            raise SettingError("{data} {path} line {number}: alternatives and candidates must be lists of strings",
                               path=path, number=number)
        out.append(Sample(document, [Question(record["question"], record["answer"], **{
            k: tuple(v) for k, v in lists.items()})]))
    if not out:
        raise SettingError("{data} {path} holds no records", path=path)
    return out


def exact_match(answer: str, expected: str) -> bool:
    return normalise(answer) == normalise(expected)
