"""A PDF's pages' text, one page at a time: opened and checked here, extracted here or by a second Python process.

Extracting a page's text is pure Python (pypdf; docs/measurements/what-makes-it-fast.md, item 9), and a command
spends its first seconds importing torch and transformers, which is pure Python too: a thread could not run beside
it. So with `prefetch`, a second interpreter (`python -m locret_cli.inputs.pdf_pages FILE`) starts as the document
opens and extracts pages while this one imports, up to `PREFETCH_PAGES` ahead of the reader. It sends each page as
one JSON line, `[number, text, warning]`, and this process checks each. If the helper cannot start, stops early or
sends anything else, it is stopped and this process extracts the remaining pages itself: the pages' text is the same
either way. A PDF of more than `PREFETCH_MAX_PAGES` pages gets no helper: it would parse the file again, and pypdf
holds the whole page tree in each process.
"""

from __future__ import annotations

import json
import mmap
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from locret_cli.errors import InputError, LocretError

PREFETCH_PAGES = 1024  # pages the helper holds extracted ahead of the reader, besides what the pipe holds
PREFETCH_MAX_PAGES = 10_000  # above this, no helper: it would hold a second page tree (about 8 KB a page)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding this locret_cli, for the helper's imports


@dataclass
class OpenPdf:
    """A checked, memory-mapped PDF with at least one page, and the helper extracting its pages, if any; `close()`
    releases the file and stops the helper."""

    reader: object  # pypdf.PdfReader
    mapped: mmap.mmap
    pages: int
    release: Callable[[], None]
    helper: subprocess.Popen | None = None

    def close(self) -> None:
        if self.helper is not None:
            _stop(self.helper)
            self.helper = None
        self.release()


def open_pdf(path: Path, prefetch: bool = False, name: str | None = None) -> OpenPdf:
    """Open, decrypt with the empty password where needed, and count the pages of `path`; with `prefetch`, start the
    helper process extracting its pages. Raises LocretError, naming the file `name` (default: `path`), for an empty,
    unreadable, encrypted or malformed file, or one without pages."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    name = name or str(path)

    if path.stat().st_size == 0:
        raise InputError(f"{name} is empty: there is no text to read")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror}") from None
    try:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # not a regular file: a pipe or a device
        handle.close()
        raise InputError(f"cannot map {name} into memory ({exc}); save it as a regular file first") from None

    def close() -> None:
        mapped.close()
        handle.close()

    try:
        reader = PdfReader(mapped)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except DependencyError:
                opened = 0
            if not opened:
                raise InputError(f"{name} is encrypted; decrypt it first (e.g. `qpdf --decrypt in.pdf out.pdf`)")
        total = len(reader.pages)
        reader.resolved_objects.clear()
        if total == 0:
            raise InputError(f"{name} has no pages")
    except LocretError:
        close()
        raise
    except Exception as exc:  # a malformed file makes pypdf raise many types, RecursionError among them
        close()
        raise InputError(f"{name} is not a readable PDF ({type(exc).__name__}: {_first_line(exc)})") from None
    helper = _start_helper(path) if prefetch and total <= PREFETCH_MAX_PAGES else None
    return OpenPdf(reader, mapped, total, close, helper)


def page_text(pdf: OpenPdf, path: Path, number: int) -> tuple[str, str | None]:
    """(text, warning) of page `number` (1-based): its text, or "" and why it was skipped. The page's parsed objects
    are dropped afterwards, so memory stays flat across pages."""
    try:
        return pdf.reader.pages[number - 1].extract_text() or "", None
    except Exception as exc:  # malformed content streams raise many types
        return "", (f"{path}: page {number} skipped, its text could not be read "
                    f"({type(exc).__name__}: {_first_line(exc)})")
    finally:
        pdf.reader.resolved_objects.clear()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no details"


def page_texts(pdf: OpenPdf, path: Path) -> Iterator[tuple[int, str, str | None]]:
    """(number, text, warning) for every page in order: the helper's pages as far as it delivers them, if it runs,
    then this process's. The helper is stopped once it has delivered or failed."""
    number = 1
    if pdf.helper is not None:
        for line in pdf.helper.stdout:
            page = _checked(line, number) if number <= pdf.pages else None
            if page is None:
                break
            yield page
            number += 1
        _stop(pdf.helper)
        pdf.helper = None
    for rest in range(number, pdf.pages + 1):
        yield rest, *page_text(pdf, path, rest)


def _start_helper(path: Path) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(helper_command(path), cwd=PACKAGE_ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, encoding="utf-8", errors="replace")
    except OSError:
        return None


def helper_command(path: Path) -> list[str]:
    """The helper's command line; it runs in `PACKAGE_ROOT`, so it imports this same locret_cli."""
    return [sys.executable, "-m", "locret_cli.inputs.pdf_pages", str(path.resolve())]


def _checked(line: str, number: int) -> tuple[int, str, str | None] | None:
    """The page the helper sent, if it is page `number` in the expected form; else None."""
    try:
        sent, text, warning = json.loads(line)
    except (ValueError, TypeError):  # not JSON, or not three items
        return None
    if sent != number or not isinstance(text, str) or not (warning is None or isinstance(warning, str)):
        return None
    return number, text, warning


def _stop(helper: subprocess.Popen) -> None:
    if helper.poll() is None:
        helper.kill()
    helper.wait()
    helper.stdout.close()


def main(argv: list[str] | None = None) -> None:
    """The helper: extract every page of the file named in `argv` and send it on stdout, one JSON line a page.
    Exits quietly when the reader stops listening; a file it cannot open sends nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the reader's to handle; it stops the helper
    path = Path((argv or sys.argv[1:])[0])
    try:
        pdf = open_pdf(path)
    except LocretError:
        return
    pages: queue.Queue = queue.Queue(maxsize=PREFETCH_PAGES)
    sender = threading.Thread(target=_send, args=(pages,), daemon=True)
    sender.start()
    for number in range(1, pdf.pages + 1):
        pages.put(json.dumps([number, *page_text(pdf, path, number)]) + "\n")
    pages.put(None)
    sender.join()


def _send(pages: queue.Queue) -> None:
    """Write the extracted pages to stdout as they come, blocking on the pipe, not on the extraction."""
    try:
        while (line := pages.get()) is not None:
            sys.stdout.write(line)
            sys.stdout.flush()
    except (BrokenPipeError, OSError):
        os._exit(0)  # the reader is gone


if __name__ == "__main__":
    main()
