"""Questions from a file: one per line, or JSONL objects with a "question" key (other keys are kept)."""

from __future__ import annotations

from pathlib import Path

from locret_cli.errors import InputError
from locret_cli.inputs.jsonl import jsonl_records


def load_questions(path: str) -> list[str]:
    """The questions in `path`, in order. A file whose first non-blank line starts with `{` (or named *.jsonl) is
    JSONL; otherwise each non-blank line is a question. Raises LocretError for an unreadable or empty file and for a
    JSONL line that is not an object with a non-empty "question" string."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise InputError(f"no such questions file: {path}")
    try:
        lines = file.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read questions from {path}: {exc}") from None
    numbered = [(n, line.strip()) for n, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise InputError(f"{path} holds no questions")
    if file.suffix != ".jsonl" and not numbered[0][1].startswith("{"):
        return [line for _, line in numbered]
    questions = []
    for number, record in jsonl_records(lines, path):
        question = record.get("question") if isinstance(record, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise InputError(f'{path} line {number} has no "question" string')
        questions.append(question)
    return questions


def check_question(question: str) -> str:
    """`question`, or a one-line LocretError when it is empty."""
    if not question.strip():
        raise InputError("the question is empty")
    return question
