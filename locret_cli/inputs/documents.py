"""Reading documents as a stream: PDF page by page, text block by block, stdin with `-`.

Nothing here holds a whole book at once. An input is opened once and its first bytes tell a PDF from text, so a
pipe, a FIFO or `/dev/fd/N` reads as a regular file does. Text is decoded incrementally (`text_stream.py`, which
refuses binary data) and cut at whitespace into blocks of about 64K characters; each block (or PDF page) is tokenized
on its own and the ids are handed out in chunks of the engine's size, each tagged with the pages it came from. A PDF
is memory-mapped rather than read into memory (one arriving through a pipe is first copied into a private temporary
file, whose name is removed once it is mapped), and the objects pypdf parses for a page are dropped once its text is
out, so memory does not grow with the book's content (the page tree, about 8 KB a page, is held while reading).
`pdf_pages.py` opens PDFs and extracts their pages' text, in a second process where the caller asks.

Documents are untrusted: whatever a malformed file makes the PDF parser raise becomes one LocretError.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from locret_cli.errors import InputError, LocretError
from locret_cli.inputs.pdf_pages import OpenPdf, open_pdf, page_texts
from locret_cli.inputs.sources import SourceMap, TokenChunk
from locret_cli.inputs.text_stream import READ_BYTES, TextRead, check_encoding, decoded_blocks, read_up_to
from locret_cli.inputs.tokenizer import encode_text, encode_text_with_offsets

TEXT_BLOCK_CHARS = 65536
PDF_MAGIC = b"%PDF-"


@dataclass
class Segment:
    """A piece of text and where it came from. page is 1-based for PDFs, None for text."""

    text: str
    page: int | None
    units_done: int  # pages read (PDF) or bytes read (text) once this segment is out


@dataclass
class Document:
    """An input opened for streaming; `segments()` reads it. A regular file can be read again (each call opens it
    afresh); a stream (stdin, a pipe, a FIFO) only once, and a second call raises InputError."""

    name: str
    kind: str  # "pdf" or "text"
    unit: str  # progress unit: "pages" or "bytes"
    total_units: int | None  # None when unknown (stdin, a pipe)
    segments: Callable[[], Iterator[Segment]]
    warnings: list[str] = field(default_factory=list)
    pages: int | None = None
    sha256: str | None = None  # of the bytes read; set once `segments()` is exhausted
    size_bytes: int | None = None


def text_document(text: str, name: str = "generated") -> Document:
    """A Document over a string already in memory."""
    return Document(name=name, kind="text", unit="bytes", total_units=len(text),
                    segments=lambda: iter([Segment(text, None, len(text))]))


def open_document(source: str, encoding: str | None = None, stdin: BinaryIO | None = None,
                  prefetch: bool = False) -> Document:
    """Open a PDF or text file, or stdin for `-`: opened once, a PDF told from text by its first bytes (or a `.pdf`
    name), and read on from there. Raises LocretError for anything unreadable. With `prefetch`, a regular PDF
    file's pages are extracted from now on by a second process, ahead of the reader (`pdf_pages.py`)."""
    if encoding is not None:
        check_encoding(encoding)
    if source == "-":
        path, name, stream = None, "<stdin>", stdin if stdin is not None else sys.stdin.buffer
    else:
        path = Path(source).expanduser()
        if not path.exists():
            raise InputError(f"no such file: {source}")
        if path.is_dir():
            raise InputError(f"{source} is a directory, not a document")
        name, stream = str(path), _opened(path)
    try:
        head = read_up_to(stream, len(PDF_MAGIC), name)
        size = _regular_size(stream) if path is not None else None
    except LocretError:
        _close(stream)
        raise
    if head == PDF_MAGIC or (path is not None and path.suffix.lower() == ".pdf"):
        if size is None:
            return _pdf_document(name, _spooled_pdf(name, head, stream), None)
        stream.close()  # the PDF reader maps the file by its name, as the helper process opens it
        return _pdf_document(name, open_pdf(path, prefetch), lambda: open_pdf(path))
    reopen = (lambda: (_opened(path), b"")) if size is not None else None
    return _text_document(name, (stream, head), reopen, size, encoding)


def _opened(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _regular_size(stream: BinaryIO) -> int | None:
    """The size of the regular file `stream` reads; None for a pipe, FIFO, device or anything without a file."""
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no file behind it (io.UnsupportedOperation is both)
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None


def _close(stream: BinaryIO) -> None:
    if stream is not sys.stdin.buffer:
        stream.close()


def _next_opening(first: list, reopen: Callable | None, name: str):
    """What the first read reads (taken from `first`), then a fresh opening for each read after; a stream has none."""
    if first:
        return first.pop()
    if reopen is None:
        raise InputError(f"{name} is a stream and was read already; save it to a file to read it more than once")
    return reopen()


def _text_document(name: str, opening: tuple[BinaryIO, bytes], reopen: Callable[[], tuple[BinaryIO, bytes]] | None,
                   size: int | None, encoding: str | None) -> Document:
    """A text Document; `opening` is the open stream and the bytes already read from it."""
    doc = Document(name=name, kind="text", unit="bytes", total_units=size, segments=lambda: iter(()))
    first = [opening]

    def segments() -> Iterator[Segment]:
        stream, head = _next_opening(first, reopen, name)
        read = TextRead()
        try:
            for text, done in decoded_blocks(stream, head, name, encoding, read):
                yield Segment(text, None, done)
        finally:
            _close(stream)
        doc.sha256, doc.size_bytes = read.sha256, read.size_bytes
        if read.replaced_bytes:
            hint = "" if encoding else "; pass --encoding if the file is not UTF-8"
            doc.warnings.append(
                f"{name}: {read.replaced_bytes} invalid {read.encoding} byte(s) replaced with U+FFFD{hint}")

    doc.segments = segments
    return doc


def _spooled_pdf(name: str, head: bytes, stream: BinaryIO) -> OpenPdf:
    """The PDF arriving on `stream` (after `head`), copied into a private temporary file and mapped from there. The
    file's name is removed as soon as it is mapped (where the system keeps a mapped file's name, when the PDF is
    closed), so nothing is left behind. No helper process extracts its pages: it would open the file by its name."""
    spool = None
    try:
        handle, spool = tempfile.mkstemp(prefix="locret-", suffix=".pdf")
        with os.fdopen(handle, "wb") as copy:
            block = head
            while block:
                copy.write(block)
                block = read_up_to(stream, READ_BYTES, name)
        pdf = open_pdf(Path(spool), name=name)
    except OSError as exc:
        _remove(spool)
        why = exc.strerror or exc
        raise InputError(f"cannot copy {name} to a temporary file ({why}); save it to a file first") from None
    except BaseException:
        _remove(spool)
        raise
    finally:
        _close(stream)
    release = pdf.release

    def release_and_remove() -> None:
        release()
        _remove(spool)

    pdf.release = release_and_remove
    _remove(spool)  # the mapping outlives the name
    return pdf


def _remove(path: str | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):  # gone already, or mapped on a system that keeps the name till it closes
            os.unlink(path)


def _pdf_document(name: str, pdf: OpenPdf, reopen: Callable[[], OpenPdf] | None) -> Document:
    """A PDF Document over the opened `pdf`; `reopen` opens it afresh for a later read (None: it cannot be)."""
    doc = Document(name=name, kind="pdf", unit="pages", total_units=pdf.pages, segments=lambda: iter(()),
                   pages=pdf.pages)
    first = [pdf]

    def segments() -> Iterator[Segment]:
        opened = _next_opening(first, reopen, name)
        with_text = 0
        try:
            for number, text, warning in page_texts(opened, Path(name)):
                if warning:
                    doc.warnings.append(warning)
                if text.strip():
                    with_text += 1
                    yield Segment(text + "\n\n", number, number)
            doc.sha256, doc.size_bytes = hashlib.sha256(opened.mapped).hexdigest(), len(opened.mapped)
        finally:
            opened.close()
        if with_text == 0:
            raise InputError(
                f"{name} has no text layer (scanned images?); run OCR first, e.g. `ocrmypdf in.pdf out.pdf`"
            )

    doc.segments = segments
    return doc


def token_chunks(document: Document, tokenizer, chunk_size: int, prefix_ids: list[int],
                 source_map: SourceMap | None = None) -> Iterator[TokenChunk]:
    """Tokenize `document` incrementally and yield chunks of `chunk_size` ids; the first starts with `prefix_ids`.

    The document is data: it goes through `encode_text`, so its special-token strings stay ordinary text. Given a
    `source_map` (of the document's kind), records where each page or paragraph starts as it goes.

    Raises LocretError if the document holds no text at all.
    """
    ids: list[int] = list(prefix_ids)
    first_page = last_page = None
    units = 0
    consumed = len(prefix_ids)  # token index of the next id to be encoded
    pending = ""
    seen_text = False

    def take(final: bool) -> Iterator[TokenChunk]:
        nonlocal ids, first_page
        while len(ids) >= chunk_size or (final and ids):
            chunk, ids = ids[:chunk_size], ids[chunk_size:]
            yield TokenChunk(chunk, first_page, last_page, units)
            first_page = last_page

    def encode(text: str, page: int | None) -> None:
        nonlocal consumed
        if source_map is not None and page is None:
            piece, offsets = encode_text_with_offsets(tokenizer, text)
            source_map.add_text(consumed, text, offsets)
        else:
            piece = encode_text(tokenizer, text)
            if source_map is not None and piece:
                source_map.add_page(consumed, page)
        ids.extend(piece)
        consumed += len(piece)

    for segment in document.segments():
        units = segment.units_done
        if segment.page is not None:
            first_page = segment.page if first_page is None else first_page
            last_page = segment.page
        seen_text = seen_text or bool(segment.text.strip())
        pending += segment.text
        while len(pending) >= TEXT_BLOCK_CHARS or (segment.page is not None and pending):
            cut = _cut_point(pending) if segment.page is None else len(pending)
            encode(pending[:cut], segment.page)
            pending = pending[cut:]
            yield from take(final=False)
    if pending:
        encode(pending, None)
    if not seen_text:
        raise InputError(f"{document.name} is empty: there is no text to read")
    yield from take(final=True)


def _cut_point(text: str) -> int:
    """Where to split a long text block: before the last whitespace in the first TEXT_BLOCK_CHARS characters."""
    cut = max(text.rfind(" ", 0, TEXT_BLOCK_CHARS), text.rfind("\n", 0, TEXT_BLOCK_CHARS))
    return cut if cut > 0 else TEXT_BLOCK_CHARS
