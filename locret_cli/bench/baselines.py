"""The rows a user would pick instead of locret, beside the policies' rows of `locret bench`.

    rag-minilm      the document's passages (`rag.py`) ranked against the question by all-MiniLM-L6-v2
    rag-bm25        the same, ranked by BM25
    passage-oracle  the window around the answer's place, where the task tells it: the reading ceiling

Each question gets its own reading: the chosen text, at most `tokens` tokens (`--rag-tokens`, or a row's own
`:tokens=N`), read with a full cache and asked with the same prompt and answer settings as the policies' rows, with
`reread` 0 (one read, no windows read again). Verdicts judge the answer against the whole document's text, as for
every row. A document's passages are cut, and indexed by the ranker, once for all its questions.

The answer's place: a natural question's `depth`; elsewhere where the document first states the answer (the
pass key, a fact's value); a row where some question has none (a --data answer the document does not hold) is
skipped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from locret_cli.api import Session
from locret_cli.api.reading import Reading
from locret_cli.bench import rag, rankers
from locret_cli.bench.tasks import Question, Sample
from locret_cli.checks.grounding import DocumentText
from locret_cli.errors import SettingError
from locret_cli.inputs.documents import Document, text_document, token_chunks
from locret_cli.settings import ReadSettings

BASELINES = {"rag-minilm": "minilm", "rag-bm25": "bm25", "passage-oracle": None}  # row: its ranker
READS = {"rag-minilm": "the top passages by all-MiniLM-L6-v2", "rag-bm25": "the top passages by BM25",
         "passage-oracle": "the window around the answer"}  # what each row reads, for a table's caption


@dataclass(frozen=True)
class Baseline:
    """A baseline row: which one (a key of BASELINES) and its cap."""

    name: str
    tokens: int  # the most tokens each reading holds

    @property
    def ranker(self) -> str | None:
        return BASELINES[self.name]

    def missing(self) -> str | None:
        """Why this row cannot run here (a package it needs is not installed), or None."""
        return rankers.missing(self.ranker) if self.ranker else None

    def settings(self) -> dict:
        """What this row adds to the settings it reports."""
        shape = {"passage_words": rag.PASSAGE_WORDS, "passage_stride": rag.PASSAGE_STRIDE} if self.ranker else {}
        return {"baseline": self.name, "rag_tokens": self.tokens, **shape}


def is_baseline(row: str) -> bool:
    """Whether bench row `row` is a baseline's (else a policy's)."""
    return row.split(":")[0] in BASELINES


def baseline_variant(row: str, tokens: int = rag.RAG_TOKENS) -> Baseline:
    """A baseline row: 'rag-bm25', or with a cap of its own, 'passage-oracle:tokens=3072' (else `tokens`)."""
    name, *pairs = row.split(":")
    if name not in BASELINES:
        raise SettingError("{baselines}: unknown baseline {name!r}; choose from " + ", ".join(BASELINES), name=name)
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key != "tokens" or not value.isdigit():
            raise SettingError("{baselines}: {pair!r} is not tokens=N, as in passage-oracle:tokens=3072", pair=pair)
        tokens = int(value)
    if tokens < rag.MIN_RAG_TOKENS:
        raise SettingError("{baselines}: " + f"{row!r} reads fewer than {rag.MIN_RAG_TOKENS} tokens")
    return Baseline(name, tokens)


@dataclass
class Asked:
    """One question of a cell, the reading it is asked of, and how the cell counts it."""

    sample: Sample
    question: Question
    reading: Reading
    judged: DocumentText  # what its verdict judges the answer against
    document_tokens: int  # the whole document's tokens
    new_read: bool  # its reading was read for it: that read's time counts
    first: bool  # its document's first question: its time to first token is the document's
    before_s: float = 0.0  # seconds spent choosing what to read (cutting, indexing, ranking), before the read


def unplaced(samples: list[Sample]) -> str | None:
    """Why the passage oracle cannot run on `samples` (questions whose answer's place is unknown), or None."""
    texts = {id(s): document_string(s.document) for s in samples}
    missing = sum(answer_place(q, texts[id(s)]) is None for s in samples for q in s.questions)
    total = sum(len(s.questions) for s in samples)
    return f"the answer's place is unknown for {missing} of {total} questions" if missing else None


def baseline_readings(session: Session, baseline: Baseline, samples: list[Sample],
                      settings: ReadSettings) -> Iterator[Asked]:
    """Each question's own reading of what `baseline` chooses from its document, read with a full cache."""
    tokenizer = session.loaded.tokenizer
    count = rag.token_counter(tokenizer)
    ranker = rankers.RANKERS[baseline.ranker]() if baseline.ranker else None
    for sample in samples:
        started = time.perf_counter()
        text = document_string(sample.document)
        passages = rag.cut_passages(text)
        before = time.perf_counter() - started
        judged, tokens = DocumentText([text], [sample.document.name]), document_tokens(sample.document, tokenizer)
        for i, question in enumerate(sample.questions):
            started = time.perf_counter()
            if ranker is None:
                chosen = rag.oracle_window(passages, answer_place(question, text), count, baseline.tokens)
            else:
                order = ranker.rank(question.question, passages.texts)
                chosen = rag.fit_passages(passages, order, count, baseline.tokens)
            before += time.perf_counter() - started
            reading = session.read(text_document(chosen, f"{sample.document.name} ({baseline.name})"), settings,
                                   force=True)
            yield Asked(sample, question, reading, judged, tokens, True, i == 0, before)
            before = 0.0


def answer_place(question: Question, text: str) -> float | None:
    """Where `question`'s answer is (0-1 of the document's characters): its `depth`, else where the document first
    states the answer (case aside); None where neither tells."""
    if question.depth is not None:
        return question.depth
    at = text.casefold().find(question.answer.casefold()) if question.answer else -1
    return (at + len(question.answer) / 2) / len(text) if at >= 0 else None


def document_tokens(document: Document, tokenizer) -> int:
    """The document's tokens, counted as a reading counts them (`token_chunks`)."""
    return sum(len(chunk.ids) for chunk in token_chunks(document, tokenizer, 1 << 20, []))


def document_string(document: Document) -> str:
    """A document's whole text, its pages' or blocks' one after another."""
    return "".join(segment.text for segment in document.segments())
