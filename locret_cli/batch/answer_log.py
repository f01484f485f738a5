"""The batch's `--out` file: JSONL, one row per (document, question), appended and flushed as each document is done.

Each row's `key` hashes the document's bytes and the question, so a rerun of the same command skips what is
already there. A run killed while writing leaves at most one torn last line; opening the log drops it. Rows made
with other options (another model, budget, ...) are refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, so nothing stops two runs sharing a log
    fcntl = None

from locret_cli.errors import LocretError, SettingError
from locret_cli.files import replacing, write_synced

ROW_FIELDS = ("key", "source", "question", "answer", "error", "run")


def row_key(document_id: str, question: str) -> str:
    """The row's identity: a document's bytes (their SHA-256) and the question asked of it."""
    return hashlib.sha256(f"{document_id}\n{question}".encode()).hexdigest()[:32]


class AnswerLog:
    """Rows already written (by key) and an append handle for new ones. Use `open`, as a context manager."""

    def __init__(self, path: Path, run: dict, rows: dict[str, dict], torn_bytes: int, handle):
        self.path, self.run, self.rows, self.torn_bytes, self.handle = path, run, rows, torn_bytes, handle

    @classmethod
    def open(cls, path: str | Path, run: dict, retry_failed: bool = False) -> "AnswerLog":
        """Open (or create) the log at `path` for a run with options `run`. Refuses, in one line, a file that is
        not a batch log or whose rows were made with other options. `retry_failed` first rewrites the file without
        its error rows, so that those questions are asked again."""
        path = Path(path).expanduser()
        if path.suffix.lower() != ".jsonl":
            raise SettingError("{path}: {out} must end in .jsonl", path=path)
        if path.is_dir() or not path.parent.is_dir():
            raise LocretError(f"cannot write {path}: " + ("it is a directory" if path.is_dir() else
                                                          f"{path.parent} is not a directory"))
        handle = _locked(path)  # before reading: another run may be writing it
        try:
            rows, torn = _read_rows(path)
            for row in rows.values():
                if row["run"] != run:
                    raise SettingError("{path} holds answers made with other options ({difference}): rerun with "
                                       "those, or write to another {out}", path=path,
                                       difference=_difference(row["run"], run))
            if retry_failed and any(row["error"] for row in rows.values()):
                rows = {key: row for key, row in rows.items() if not row["error"]}
                _rewrite(path, rows.values())
                handle.close()
                handle = _locked(path)
        except BaseException:
            handle.close()
            raise
        return cls(path, run, rows, torn, handle)

    def done(self, key: str) -> bool:
        return key in self.rows

    def append(self, rows: Iterable[dict]) -> None:
        """Write `rows` (one line each), flush them and sync them to disk."""
        rows = list(rows)
        self.handle.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.rows.update((row["key"], row) for row in rows)

    def sort(self, order: list[str]) -> None:
        """Rewrite the file with the rows whose keys are in `order` first, in that order, then any others (from
        other inputs) as they were."""
        rank = {key: n for n, key in enumerate(order)}
        rows = sorted(self.rows.values(), key=lambda row: rank.get(row["key"], len(rank)))
        _rewrite(self.path, rows)
        self.handle.close()
        self.handle = _locked(self.path)

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> "AnswerLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _locked(path: Path):
    """`path` opened for appending, holding an exclusive lock: one run writes a log at a time."""
    try:
        handle = path.open("a", encoding="utf-8")
    except OSError as exc:
        raise LocretError(f"cannot write {path}: {exc.strerror}") from None
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise SettingError("another locret batch is writing {path}: wait for it, or write to another {out}",
                               path=path) from None
    return handle


def _read_rows(path: Path) -> tuple[dict[str, dict], int]:
    """The rows in `path` by key, and how many bytes of a torn last line (no newline) were cut off."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LocretError(f"cannot read {path}: {exc.strerror}") from None
    torn = len(data) - (data.rfind(b"\n") + 1)
    if torn:
        with path.open("r+b") as f:  # a row whose write was cut short by a kill: it is asked again
            f.truncate(len(data) - torn)
    rows = {}
    for number, line in enumerate(data[: len(data) - torn].decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or any(name not in row for name in ROW_FIELDS):
            raise SettingError("{path} line {number} is not a locret batch row: write to another {out}", path=path,
                               number=number)
        rows[row["key"]] = row
    return rows, torn


def _rewrite(path: Path, rows: Iterable[dict]) -> None:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    with replacing(path, "rewrite") as temporary:
        write_synced(temporary, lambda f: f.write(text))


def _difference(old: dict, new: dict) -> str:
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            return f"{name} {_shown(old.get(name))}, not {_shown(new.get(name))}"
    return "none"


def _shown(value) -> str:
    return "the default" if value is None else json.dumps(value)
