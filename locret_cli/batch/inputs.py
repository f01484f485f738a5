"""What a batch reads and asks: a glob, a directory or a JSONL corpus, expanded into one Job per document.

    contracts/*.pdf        every file the glob matches (`**` crosses folders)
    contracts/             every .pdf, .txt, .md, .rst or .text file below it, hidden ones excepted
    corpus.jsonl           {"source": "a.pdf", "questions": ["...", ...]} per line; sources relative to the file

Questions from `--questions FILE` are asked of every document, after a JSONL line's own. Each document is hashed
here, before any model is loaded, so that a rerun knows what is already answered without reading anything again.
"""

from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.jsonl import jsonl_records
from locret_cli.inputs.questions import load_questions

DOCUMENT_SUFFIXES = (".pdf", ".txt", ".md", ".rst", ".text")
HASH_BLOCK = 1 << 20


@dataclass
class Job:
    """One document and the questions to ask of it. `index` is its place in the inputs; `error` is set when the
    file cannot even be hashed (missing, unreadable), and every question then gets that error."""

    index: int
    source: str
    questions: list[str]
    sha256: str | None = None
    error: str | None = None
    same_as: list[str] = field(default_factory=list)  # other inputs with the same bytes, asked through this one

    @property
    def document_id(self) -> str:
        """What identifies the document in the answer log: its bytes' SHA-256, or its path when it has none."""
        return self.sha256 or f"path:{self.source}"


def expand_inputs(spec: str, questions_file: str | None = None, exclude: tuple[str, ...] = ()) -> list[Job]:
    """The jobs `spec` names, in input order, each with its questions. Documents with the same bytes become one job
    (the first path), the others listed in `same_as`. `exclude` holds the batch's output: a glob or directory skips
    it and the questions file; as the questions file, the corpus or a document a corpus lists, it is refused (this
    writes nothing). Raises LocretError when nothing matches, a JSONL line is malformed, or a document would have no
    question."""
    outputs = [Path(p).expanduser() for p in exclude if p]
    if questions_file:
        _refuse_output(outputs, Path(questions_file).expanduser(), "the {questions} file")
    shared = load_questions(questions_file) if questions_file else []
    path = Path(spec).expanduser()
    ours = [*outputs, *([Path(questions_file).expanduser()] if questions_file else [])]
    if path.suffix.lower() == ".jsonl" and path.is_file():
        _refuse_output(outputs, path, "the corpus of documents to read")
        listed = _corpus(path, shared)
        for source, _ in listed:
            _refuse_output(outputs, Path(source), "a document that {corpus} lists", corpus=path)
    elif path.is_dir():
        listed = [(str(p), shared) for p in _documents_under(path) if not _any_same(p, ours)]
        if not listed:
            raise LocretError(f"{spec} holds no documents ({', '.join(DOCUMENT_SUFFIXES)})")
    else:
        matches = sorted(m for m in glob.glob(str(path), recursive=True)
                         if Path(m).is_file() and not _any_same(Path(m), ours))
        if not matches:
            raise LocretError(f"no file matches {spec}" if glob.has_magic(spec) else f"no such file: {spec}")
        listed = [(m, shared) for m in matches]
    if any(not questions for _, questions in listed):
        raise SettingError("give {questions} FILE: some documents have no questions of their own")
    return _merge(listed)


def _refuse_output(outputs: list[Path], read: Path, what: str, **values) -> None:
    """A one-line SettingError when an output of the batch is the file `read`, which the batch reads as `what` (a
    message template: settings in braces, `values` for the rest)."""
    for output in outputs:
        if same_file(output, read):
            raise SettingError("{out} {path} is also " + what + ": write the answers to another file", path=output,
                               **values)


def _any_same(path: Path, others: list[Path]) -> bool:
    return any(same_file(path, other) for other in others)


def same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file: the same file on disk where both exist (links included), else the same
    path once resolved."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links
        return a.absolute() == b.absolute()


def _corpus(path: Path, shared: list[str]) -> list[tuple[str, list[str]]]:
    listed = []
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # a question may hold U+2028 and other breaks
    except (OSError, UnicodeDecodeError) as exc:
        raise LocretError(f"cannot read {path}: {exc}") from None
    for number, record in jsonl_records(lines, str(path)):
        source = record.get("source") if isinstance(record, dict) else None
        own = record.get("questions", []) if isinstance(record, dict) else None
        if not isinstance(source, str) or not source.strip():
            raise LocretError(f'{path} line {number} has no "source" path')
        if not isinstance(own, list) or not all(isinstance(q, str) and q.strip() for q in own):
            raise LocretError(f'{path} line {number}: "questions" must be a list of non-empty strings')
        listed.append((str(path.parent / Path(source).expanduser()), own + shared))
    if not listed:
        raise LocretError(f"{path} lists no documents")
    return listed


def _documents_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in DOCUMENT_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _merge(listed: list[tuple[str, list[str]]]) -> list[Job]:
    """One job per distinct document: the same bytes listed twice (or under two paths) are read once, with the
    union of their questions in first-seen order."""
    jobs: dict[str, Job] = {}
    for source, questions in listed:
        sha256, error = file_sha256(source)
        job = Job(len(jobs), source, [], sha256, error)
        job = jobs.setdefault(job.document_id, job)
        if source != job.source and source not in job.same_as:
            job.same_as.append(source)
        job.questions.extend(q for q in questions if q not in job.questions)
    return list(jobs.values())


def file_sha256(source: str) -> tuple[str | None, str | None]:
    """(hex digest, None), or (None, a one-line reason) for a file that cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(source, "rb") as f:
            while block := f.read(HASH_BLOCK):
                digest.update(block)
    except FileNotFoundError:
        return None, f"no such file: {source}"
    except OSError as exc:
        return None, f"cannot read {source}: {exc.strerror}"
    return digest.hexdigest(), None
