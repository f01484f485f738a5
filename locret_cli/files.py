"""Writing the user's files safely: never over a file they have unless asked, and never half-written."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from locret_cli.errors import LocretError, SettingError

CONTEXT_SUFFIX = ".locret"  # a context saved by `locret read` (`api/saved_context.py`)


def is_saved_context(source: str) -> bool:
    """Whether `source` names a saved context rather than a document: by its name, before anything is opened."""
    return source.endswith(CONTEXT_SUFFIX)


def refuse_existing(path: str | Path, force: bool | None = None) -> Path:
    """`path` as a Path, unless a file is there already and `force` is not set: then a one-line error, which names
    `--force` where the command has one (`force` False; None: no such option)."""
    path = Path(path).expanduser()
    if path.exists() and not force:
        if force is None:
            raise LocretError(f"{path} already exists; choose another path")
        raise SettingError("{path} already exists; choose another path or pass {force} to replace it", path=path)
    return path


def check_output(path: str | Path, force: bool, suffix: str) -> Path:
    """`path` as a Path if a file may be written there: it ends in `suffix`, its folder exists, and it does not
    exist yet (or `force`). One-line LocretError otherwise."""
    path = Path(path).expanduser()
    if path.suffix.lower() != suffix:
        raise LocretError(f"{path}: the file's name must end in {suffix}")
    refuse_existing(path, force)
    if not path.parent.is_dir():
        raise LocretError(f"cannot write {path}: {path.parent} is not a directory")
    return path


@contextmanager
def replacing(path: Path, verb: str = "write") -> Iterator[Path]:
    """A temporary path beside `path` to write; once the block ends, it replaces `path` in one step, with the mode
    of the file it replaces (a new file: readable as the umask allows). The temporary file is made readable by its
    owner alone until then. Any failure leaves `path` as it was and no temporary file behind."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        mode = _kept_mode(path)
        temporary.unlink(missing_ok=True)
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        yield temporary
        os.chmod(temporary, mode)  # some writers (safetensors) create files readable by their owner only
        os.replace(temporary, path)
    except OSError as exc:
        raise LocretError(f"cannot {verb} {path}: {exc.strerror}") from None
    finally:
        temporary.unlink(missing_ok=True)


def _kept_mode(path: Path) -> int:
    """The permission bits of the file at `path`, or, where there is none, those the umask allows a new file."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_synced(path: Path, write: Callable[[object], None]) -> None:
    """Open `path` for text, let `write` fill it, and flush it to disk."""
    with path.open("w", encoding="utf-8") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
