"""The batch's `--out` file: JSONL, one row per (document, question), appended and flushed as each document is done.

Each row's `key` hashes the document's bytes and the question, so a rerun of the same command skips what is
already there. A file is taken as a log only when every line is a batch row; anything else is refused untouched.
A run killed while writing leaves at most one torn last line, which opening the log cuts off. Rows made with other
options (another model, budget, ...) are refused rather than mixed in.
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
ROW_START = b'{"key": "'  # how every row written here begins (`work.row` puts the key first)
MAX_ROW_DEPTH = 32  # rows nest a few levels; a far deeper value is not a row (and may be too deep to write back)


def row_key(document_id: str, question: str) -> str:
    """The row's identity: a document's bytes (their SHA-256) and the question asked of it."""
    return hashlib.sha256(f"{document_id}\n{question}".encode()).hexdigest()[:32]


def _is_row(value: object) -> bool:
    """Whether `value` is a batch row: a dict with every one of ROW_FIELDS, `key`, `source` and `question`
    strings, `answer` and `error` strings or null, `run` a dict, nested no deeper than MAX_ROW_DEPTH."""
    return (isinstance(value, dict) and all(name in value for name in ROW_FIELDS)
            and all(isinstance(value[name], str) for name in ("key", "source", "question"))
            and all(value[name] is None or isinstance(value[name], str) for name in ("answer", "error"))
            and isinstance(value["run"], dict) and not _deeper_than(value, MAX_ROW_DEPTH))


def _row_line(row: dict) -> str:
    """`row` as one JSON line: text as UTF-8, or every non-ASCII character escaped when the row holds text that
    UTF-8 cannot encode (a path's undecodable bytes), so that it reads back the same."""
    line = json.dumps(row, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(row)
    return line + "\n"


class AnswerLog:
    """Rows already written (by key) and an append handle for new ones. Use `open`, as a context manager."""

    def __init__(self, path: Path, run: dict, rows: dict[str, dict], torn_bytes: int, handle):
        self.path, self.run, self.rows, self.torn_bytes, self.handle = path, run, rows, torn_bytes, handle

    @classmethod
    def open(cls, path: str | Path, run: dict, retry_failed: bool = False) -> "AnswerLog":
        """Open (or create) the log at `path` for a run with options `run`. Refuses, in one line and leaving the
        file as it was, a file that is not a batch log or whose rows were made with other options. Then cuts a
        torn last row and ends a last row that lacks its newline. `retry_failed` rewrites the file without its
        error rows, so that those questions are asked again."""
        path = Path(path).expanduser()
        if path.suffix.lower() != ".jsonl":
            raise SettingError("{path}: {out} must end in .jsonl", path=path)
        if path.is_dir() or not path.parent.is_dir():
            raise LocretError(f"cannot write {path}: " + ("it is a directory" if path.is_dir() else
                                                          f"{path.parent} is not a directory"))
        if path.exists() and not path.is_file():
            raise LocretError(f"cannot write {path}: it is not a regular file")
        handle = _locked(path)  # before reading: another run may be writing it
        try:
            rows, torn, unended = _read_log(path)
            for row in rows.values():
                if row["run"] != run:
                    raise SettingError("{path} holds answers made with other options ({difference}): rerun with "
                                       "those, or write to another {out}", path=path,
                                       difference=_difference(row["run"], run))
            _mend_end(path, handle, torn, unended)
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
        self.handle.write("".join(_row_line(row) for row in rows))
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


def _read_log(path: Path) -> tuple[dict[str, dict], int, bool]:
    """The rows in `path` by key; how many bytes of a torn last row follow them (its first bytes are a row's, it
    has no newline and does not parse); and whether the file ends in a line without its newline. Any other line
    refuses the file, which this only reads."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LocretError(f"cannot read {path}: {exc.strerror}") from None
    lines = data.split(b"\n")  # not str.splitlines: a row's text may hold U+2028 and other line breaks
    rows, torn = {}, 0
    for number, line in enumerate(lines, 1):
        row = _parsed_row(line)
        if row is not None:
            rows[row["key"]] = row
        elif number == len(lines) and (line.startswith(ROW_START) or ROW_START.startswith(line)) \
                and not _parses(line):
            torn = len(line)
        elif line.strip():
            raise _not_a_row(path, number)
    return rows, torn, not torn and bool(lines[-1])


def _mend_end(path: Path, handle, torn: int, unended: bool) -> None:
    """Cut a torn last row (its question is asked again), or end a last line that lacks its newline."""
    try:
        if torn:
            os.ftruncate(handle.fileno(), os.fstat(handle.fileno()).st_size - torn)
        elif unended:
            handle.write("\n")
            handle.flush()
    except OSError as exc:
        raise LocretError(f"cannot write {path}: {exc.strerror}") from None


def _parsed_row(line: bytes) -> dict | None:
    """The row `line` holds, or None when it is not valid UTF-8 JSON of a row."""
    try:
        value = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, a number too long, nested too deep to parse
        return None
    return value if _is_row(value) else None


def _parses(line: bytes) -> bool:
    """Whether `line` is a whole JSON value, whatever its bytes decode to."""
    try:
        json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    return True


def _not_a_row(path: Path, number: int) -> SettingError:
    return SettingError("{path} line {number} is not a locret batch row: write to another {out}", path=path,
                        number=number)


def _deeper_than(value: object, limit: int) -> bool:
    """Whether lists and dicts nest more than `limit` deep in `value`, found without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _rewrite(path: Path, rows: Iterable[dict]) -> None:
    """Replace the file `path` names (through a symbolic link, which stays) with `rows`, in one step."""
    text = "".join(_row_line(row) for row in rows)
    with replacing(path.resolve(), "rewrite") as temporary:
        write_synced(temporary, lambda f: f.write(text))


def _difference(old: dict, new: dict) -> str:
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            return f"{name} {_shown(old.get(name))}, not {_shown(new.get(name))}"
    return "none"


def _shown(value) -> str:
    return "the default" if value is None else json.dumps(value)
