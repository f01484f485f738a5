"""Reading documents as a stream: PDF page by page, text block by block, stdin with `-`.

Nothing here holds a whole book at once. Text is decoded incrementally and cut at whitespace into blocks of about
64K characters; each block (or PDF page) is tokenized on its own and the ids are handed out in chunks of the engine's
size, each tagged with the pages it came from. A PDF is memory-mapped rather than read into memory, and the objects
pypdf parses for a page are dropped once its text is out, so memory does not grow with the book's content (the page
tree, about 8 KB a page, is held while reading). `pdf_pages.py` opens PDFs and extracts their pages' text, in a
second process where the caller asks.

Documents are untrusted: whatever a malformed file makes the PDF parser raise becomes one LocretError, and a text
file full of NUL bytes is refused as binary rather than read.
"""

from __future__ import annotations

import codecs
import hashlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from locret_cli.errors import LocretError
from locret_cli.inputs.pdf_pages import open_pdf, page_texts
from locret_cli.inputs.sources import SourceMap, TokenChunk
from locret_cli.inputs.tokenizer import encode_text, encode_text_with_offsets

TEXT_BLOCK_CHARS = 65536
READ_BYTES = 1 << 20
BINARY_NUL_SHARE = 0.01  # a block of a byte-oriented encoding with more NUL bytes than this is not text
WIDE_ENCODINGS = ("utf-16", "utf-32")  # where NUL bytes are ordinary


@dataclass
class Segment:
    """A piece of text and where it came from. page is 1-based for PDFs, None for text."""

    text: str
    page: int | None
    units_done: int  # pages read (PDF) or bytes read (text) once this segment is out


@dataclass
class Document:
    """An input opened for streaming; `segments()` reads it once."""

    name: str
    kind: str  # "pdf" or "text"
    unit: str  # progress unit: "pages" or "bytes"
    total_units: int | None  # None when unknown (stdin)
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
    """Open a PDF or text file, or stdin for `-`. Raises LocretError for anything unreadable. With `prefetch`, a
    PDF's pages are extracted from now on by a second process, ahead of the reader (`pdf_pages.py`)."""
    if source == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        return _text_document("<stdin>", lambda: stream, None, encoding)
    path = Path(source).expanduser()
    if not path.exists():
        raise LocretError(f"no such file: {source}")
    if path.is_dir():
        raise LocretError(f"{source} is a directory, not a document")
    try:
        with path.open("rb") as f:
            magic = f.read(5)
    except OSError as exc:
        raise LocretError(f"cannot read {source}: {exc.strerror}") from None
    if magic == b"%PDF-" or path.suffix.lower() == ".pdf":
        return _pdf_document(path, prefetch)
    return _text_document(str(path), lambda: path.open("rb"), path.stat().st_size, encoding)


def _text_document(name: str, opener: Callable[[], BinaryIO], size: int | None, encoding: str | None) -> Document:
    doc = Document(name=name, kind="text", unit="bytes", total_units=size, segments=lambda: iter(()))
    if encoding is not None:
        try:  # also refuses codecs whose decoder gives bytes, not text, such as hex or zlib
            if not isinstance(codecs.getincrementaldecoder(encoding)().decode(b"", final=True), str):
                raise LookupError(encoding)
        except (LookupError, TypeError):  # rot13's decoder takes str, not bytes
            raise LocretError(f"unknown encoding {encoding!r}: name a text encoding such as utf-8 or latin-1") from None

    def segments() -> Iterator[Segment]:
        stream = opener()
        replaced = 0

        def count_and_replace(exc: UnicodeDecodeError):
            nonlocal replaced
            replaced += exc.end - exc.start
            return "\ufffd", exc.end

        codecs.register_error("locret-count", count_and_replace)
        digest = hashlib.sha256()
        try:
            first = stream.read(READ_BYTES)
            chosen = _choose_encoding(encoding, first)
            decoder = codecs.getincrementaldecoder(chosen)(errors="locret-count")
            wide = codecs.lookup(chosen).name.startswith(WIDE_ENCODINGS)
            done, block = 0, first
            while block:
                if not wide and block.count(0) > BINARY_NUL_SHARE * len(block):
                    raise LocretError(f"{name} holds binary data (NUL bytes after byte {done:,}), not text; "
                                      "pass --encoding if it is UTF-16 or UTF-32")
                done += len(block)
                digest.update(block)
                text = _decode(decoder, block, name, chosen)
                if text:
                    yield Segment(text, None, done)
                block = stream.read(READ_BYTES)
            tail = _decode(decoder, b"", name, chosen, final=True)
            if tail:
                yield Segment(tail, None, done)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        doc.sha256, doc.size_bytes = digest.hexdigest(), done
        if replaced:
            hint = "" if encoding else "; pass --encoding if the file is not UTF-8"
            doc.warnings.append(f"{name}: {replaced} invalid {chosen} byte(s) replaced with U+FFFD{hint}")

    doc.segments = segments
    return doc


def _choose_encoding(encoding: str | None, head: bytes) -> str:
    """The user's encoding, else what the BOM says, else UTF-8. UTF-16 or UTF-32 named without a byte order, in a
    file without a BOM, is read little-endian: Python's decoder would refuse it."""
    if encoding is None:
        return _sniff_encoding(head)
    name = codecs.lookup(encoding).name
    boms = {"utf-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE), "utf-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)}
    if name in boms and not head.startswith(boms[name]):
        return f"{name}-le"
    return encoding


def _decode(decoder, block: bytes, name: str, chosen: str, final: bool = False) -> str:
    try:
        return decoder.decode(block, final=final)
    except UnicodeError as exc:  # what the error handler cannot replace, such as a stateful codec's own checks
        raise LocretError(f"{name} cannot be read as {chosen}: {exc}") from None


def _sniff_encoding(head: bytes) -> str:
    for bom, name in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                      (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if head.startswith(bom):
            return name
    return "utf-8"


def _pdf_document(path: Path, prefetch: bool) -> Document:
    pdf = open_pdf(path, prefetch)
    doc = Document(name=str(path), kind="pdf", unit="pages", total_units=pdf.pages, segments=lambda: iter(()),
                   pages=pdf.pages)

    def segments() -> Iterator[Segment]:
        with_text = 0
        try:
            for number, text, warning in page_texts(pdf, path):
                if warning:
                    doc.warnings.append(warning)
                if text.strip():
                    with_text += 1
                    yield Segment(text + "\n\n", number, number)
            doc.sha256, doc.size_bytes = hashlib.sha256(pdf.mapped).hexdigest(), len(pdf.mapped)
        finally:
            pdf.close()
        if with_text == 0:
            raise LocretError(
                f"{path} has no text layer (scanned images?); run OCR first, e.g. `ocrmypdf in.pdf out.pdf`"
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
        raise LocretError(f"{document.name} is empty: there is no text to read")
    yield from take(final=True)


def _cut_point(text: str) -> int:
    """Where to split a long text block: before the last whitespace in the first TEXT_BLOCK_CHARS characters."""
    cut = max(text.rfind(" ", 0, TEXT_BLOCK_CHARS), text.rfind("\n", 0, TEXT_BLOCK_CHARS))
    return cut if cut > 0 else TEXT_BLOCK_CHARS
