"""Documents from streams and documents that are not text: a pipe, a FIFO or `/dev/fd/N` reads whole, as a regular
file does, a PDF among them; random bytes, images and archives are refused in one line, while text in a wrong but
kindred encoding reads with a warning."""

from __future__ import annotations

import hashlib
import io
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from helpers.pdfs import text_pdf
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import open_document, token_chunks
from locret_cli.inputs.text_stream import READ_BYTES
from locret_cli.inputs.tokenizer import TiktokenTokenizer

BYTES = TiktokenTokenizer.byte_level()
FACT = b"The gate code of the north depot is 4821. "
ANSWER = "The gate code of the north depot is 4821.\n"
QUESTION = "What is the gate code of the north depot?"
TWELVE_KB = FACT + b"Filler words. " * 850  # the fact in the first 100 bytes: what a pipe used to lose
SIXTY_ONE_BYTES = b"Filler words. " + FACT + b"Fill."


def write_all(opened, data: bytes) -> None:
    try:
        with opened() as sink:
            sink.write(data)
    except BrokenPipeError:  # the reader refused the data and stopped reading
        pass


@contextmanager
def piped(data: bytes):
    """`/dev/fd/N` of a pipe that a thread fills with `data`."""
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=write_all, args=(lambda: os.fdopen(write_end, "wb"), data), daemon=True)
    writer.start()
    try:
        yield f"/dev/fd/{read_end}"
    finally:
        os.close(read_end)
        writer.join(timeout=10)


def feed_fifo(path: Path, data: bytes, done: threading.Event) -> None:
    """Write `data` to the FIFO at `path`; then, till `done`, end any later open of it at once (a reader that opened
    it twice would wait for a writer for ever), so that it reads nothing rather than hangs."""
    write_all(lambda: path.open("wb"), data)
    while not done.wait(0.1):
        with suppress(OSError):  # no reader waiting
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


@contextmanager
def fifo(tmp_path: Path, data: bytes):
    """The path of a FIFO that a thread fills with `data`."""
    path, done = tmp_path / "doc.fifo", threading.Event()
    os.mkfifo(path)
    writer = threading.Thread(target=feed_fifo, args=(path, data, done), daemon=True)
    writer.start()
    try:
        yield str(path)
    finally:
        done.set()
        writer.join(timeout=10)


def text_of(document) -> str:
    return "".join(segment.text for segment in document.segments())


def ask(source: str, *extra: str, **invoke):
    return CliRunner().invoke(app, ["ask", source, QUESTION, "-q", "--max-new-tokens", "16", *extra], **invoke)


@pytest.mark.parametrize("data", [TWELVE_KB, SIXTY_ONE_BYTES, TWELVE_KB * 250], ids=["12KB", "61B", "3MB"])
def test_a_pipe_delivers_every_byte_once(data):
    assert len(SIXTY_ONE_BYTES) == 61 and len(TWELVE_KB * 250) > 2 * READ_BYTES
    with piped(data) as source:
        document = open_document(source)
        chunks = list(token_chunks(document, BYTES, 512, prefix_ids=[]))
    assert [i for chunk in chunks for i in chunk.ids] == BYTES.encode(data.decode())
    assert (document.total_units, document.size_bytes) == (None, len(data))
    assert document.sha256 == hashlib.sha256(data).hexdigest() and chunks[-1].units_done == len(data)
    with pytest.raises(LocretError, match=r"^/dev/fd/\d+ is a stream and was read already; save it to a file"):
        text_of(document)


def test_a_fifo_reads_whole(tmp_path):
    with fifo(tmp_path, TWELVE_KB) as source:
        document = open_document(source)
        assert text_of(document) == TWELVE_KB.decode() and document.size_bytes == len(TWELVE_KB)


def test_stdin_reads_whole_and_once():
    document = open_document("-", stdin=io.BytesIO(SIXTY_ONE_BYTES))
    assert text_of(document) == SIXTY_ONE_BYTES.decode()
    with pytest.raises(LocretError, match="^<stdin> is a stream and was read already"):
        text_of(document)


def test_a_regular_file_reads_again_the_same(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_bytes(TWELVE_KB)
    pdf = text_pdf(tmp_path / "doc.pdf", [FACT.decode(), "Second page."])
    for document in (open_document(str(path)), open_document(str(pdf))):
        first = text_of(document)
        assert text_of(document) == first and FACT.decode().strip() in first
    assert path.read_bytes() == TWELVE_KB


def test_a_pdf_through_a_pipe_is_spooled_and_the_copy_removed(tmp_path, monkeypatch):
    data = text_pdf(tmp_path / "doc.pdf", [FACT.decode(), "Second page."]).read_bytes()
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    with piped(data) as source:
        document = open_document(source, prefetch=True)
        assert (document.kind, document.pages) == ("pdf", 2) and list(spool.iterdir()) == []
        segments = list(document.segments())
    assert [s.page for s in segments] == [1, 2] and segments[0].text.strip() == FACT.decode().strip()
    assert document.sha256 == hashlib.sha256(data).hexdigest() and document.size_bytes == len(data)
    assert list(spool.iterdir()) == []
    with pytest.raises(LocretError, match=r"^/dev/fd/\d+ is a stream and was read already"):
        text_of(document)


def test_a_broken_pdf_through_a_pipe_is_named_as_given_and_leaves_no_copy(tmp_path, monkeypatch):
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    with piped(b"%PDF-1.7\nthis is not really a pdf\n") as source:
        with pytest.raises(LocretError, match=rf"^{source} is not a readable PDF \("):
            open_document(source)
    assert list(spool.iterdir()) == []


def test_a_pdf_through_a_pipe_with_nowhere_to_copy_it_gives_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    says = r"\(No such file or directory\); save it to a file first$"
    with piped(b"%PDF-1.7\n") as source:
        with pytest.raises(LocretError, match=rf"^cannot copy {source} to a temporary file {says}"):
            open_document(source)


@pytest.mark.parametrize("data", [TWELVE_KB, SIXTY_ONE_BYTES], ids=["12KB", "61B"])
def test_ask_answers_from_a_pipe(data):
    with piped(data) as source:
        result = ask(source)
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER


def test_ask_answers_from_a_fifo_and_from_a_pdf_on_stdin(tmp_path):
    with fifo(tmp_path, TWELVE_KB) as source:
        result = ask(source)
    assert (result.exit_code, result.stdout) == (0, ANSWER), result.output
    pdf = text_pdf(tmp_path / "doc.pdf", [FACT.decode(), "Second page."])
    result = ask("-", input=pdf.read_bytes())
    assert (result.exit_code, result.stdout) == (0, ANSWER), result.output


def test_locret_ask_reads_a_process_substitution(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_bytes(TWELVE_KB)
    command = '"$0" -m locret_cli ask <(cat "$1") "$2" -q --max-new-tokens 16'
    done = subprocess.run(["bash", "-c", command, sys.executable, str(path), QUESTION], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert (done.returncode, done.stdout) == (0, ANSWER), done.stderr
    assert path.read_bytes() == TWELVE_KB


def png(data: bytes) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 64, 48, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b"")


def zipped(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("photo.raw", data)
    return out.getvalue()


NOISE = random.Random(7).randbytes(30_000)
NOT_UTF8 = "not valid utf-8), not text; pass --encoding if it is text in another encoding"
CONTROLS = "control or private-use characters), not text; pass --encoding if it is text in another encoding"
NUL_HINT = "not text; pass --encoding if it is UTF-16 or UTF-32"


@pytest.mark.parametrize("name, data, extra, says", [
    ("random.txt", random.Random(1).randbytes(3072), [], f"43% of the characters after byte 0 are {NOT_UTF8}"),
    ("random.txt", random.Random(1).randbytes(3072), ["--encoding", "latin-1"],
     f"24% of the characters after byte 0 are {CONTROLS}"),
    ("random.txt", random.Random(1).randbytes(3072), ["--encoding", "utf-16"],
     f"9% of the characters after byte 0 are {CONTROLS}"),
    ("image.png", png(NOISE), [], f"44% of the characters after byte 0 are {NOT_UTF8}"),
    ("photos.zip", zipped(NOISE), [], f"44% of the characters after byte 0 are {NOT_UTF8}"),
    ("notes.zip", zipped(FACT * 100), [], f"NUL bytes after byte 0), {NUL_HINT}"),
])
def test_binary_data_is_refused_in_one_line(tmp_path, name, data, extra, says):
    path = tmp_path / name
    path.write_bytes(data)
    result = ask(str(path), *extra)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr == f"error: {path} holds binary data ({says}\n"
    assert path.read_bytes() == data


def test_binary_data_through_a_pipe_is_refused_after_its_first_block():
    with piped(random.Random(3).randbytes(4 * READ_BYTES)) as source:
        with pytest.raises(LocretError, match=rf"^{source} holds binary data \(4\d% of the characters after byte 0"):
            text_of(open_document(source))


def test_binary_data_after_text_is_refused_where_it_starts(tmp_path):
    path = tmp_path / "log.txt"
    path.write_bytes(b"Filler words. " * (READ_BYTES // 14 + 1))
    with path.open("r+b") as f:
        f.seek(READ_BYTES)
        f.write(random.Random(4).randbytes(READ_BYTES))
    with pytest.raises(LocretError, match=rf"holds binary data \(4\d% of the characters after byte {READ_BYTES:,} "):
        text_of(open_document(str(path)))


def test_latin1_text_read_as_utf8_reads_with_a_warning(tmp_path):
    path = tmp_path / "latin1.txt"
    data = "Größere Änderungen müssen über die Brücke geprüft werden. ".encode("latin-1") * 40 + FACT
    path.write_bytes(data)
    result = ask(str(path))
    assert (result.exit_code, result.stdout) == (0, ANSWER), result.output
    assert result.stderr == (f"warning: {path}: 280 invalid utf-8 byte(s) replaced with U+FFFD; pass --encoding if "
                             "the file is not UTF-8\n")
    assert path.read_bytes() == data


@pytest.mark.parametrize("text, encoding", [("Съешь же ещё этих мягких французских булок. ", "cp1251"),
                                            ("日本語のテキストです。", "shift_jis")])
def test_text_in_an_unrelated_encoding_is_refused_until_it_is_named(tmp_path, text, encoding):
    path = tmp_path / "other.txt"
    path.write_bytes((text * 100).encode(encoding))
    with pytest.raises(LocretError, match=r"are not valid utf-8\), not text; pass --encoding if it is text in"):
        text_of(open_document(str(path)))
    assert text_of(open_document(str(path), encoding=encoding)) == text * 100


def test_terminal_output_with_colour_codes_and_overstrike_reads(tmp_path):
    path = tmp_path / "terminal.log"
    log = "".join(f"\x1b[32m12:00:{i:02d}\x1b[0m \x1b[1;34mINFO\x1b[0m N\bNA\bAM\bME\bE handled\f\v\r\n"
                  for i in range(60))
    path.write_text(log)
    document = open_document(str(path))
    assert text_of(document) == log and document.warnings == []

