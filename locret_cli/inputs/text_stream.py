"""Text read from a byte stream block by block: its encoding chosen (the user's, else by BOM, else UTF-8), decoded
incrementally, and refused as binary where too many of a block's bytes are NUL, or of its decoded characters are
U+FFFD for undecodable bytes or control or private-use characters.

Random bytes read as UTF-8 decode to about 43% replacements and 11% control characters; read as latin-1, to 23%
control characters; as UTF-16, to 10% private-use characters. Text in a wrong but kindred encoding (latin-1 or cp1252
read as UTF-8) has a replacement per accented letter, a few percent, and text has next to no control or private-use
characters: the shares below lie between. Text in an unrelated one (cp1251 or Shift JIS read as UTF-8) is refused,
and the message says to pass --encoding.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from locret_cli.errors import InputError

READ_BYTES = 1 << 20
WIDE_ENCODINGS = ("utf-16", "utf-32")  # where NUL bytes are ordinary
BINARY_NUL_SHARE = 0.01  # a block of a byte-oriented encoding with more NUL bytes than this is not text
BINARY_REPLACED_SHARE = 1 / 3  # nor one whose decoded characters are more often U+FFFD for undecodable bytes
BINARY_ODD_SHARE = 0.05  # nor one whose decoded characters are more often `ODD_CHARACTERS`
# C0 controls but \t \n \v \f \r and the two that format terminal output, backspace (overstrike) and ESC (colour
# codes); DEL; C1 controls; the private-use area
ODD_CHARACTERS = re.compile("[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f-\x9f\ue000-\uf8ff]")
JUDGED_CHARS = 4096  # a last block of fewer characters is judged together with the block before it


@dataclass
class TextRead:
    """What `decoded_blocks` found, filled in as it reads: the digest and count of the bytes read, the encoding
    chosen, and how many bytes it could not decode."""

    sha256: str | None = None  # set once the stream is read to its end
    size_bytes: int = 0
    encoding: str | None = None
    replaced_bytes: int = 0


def check_encoding(encoding: str) -> None:
    """Raise InputError unless `encoding` names a codec that decodes bytes to text."""
    try:  # also refuses codecs whose decoder gives bytes, not text, such as hex or zlib
        if not isinstance(codecs.getincrementaldecoder(encoding)().decode(b"", final=True), str):
            raise LookupError(encoding)
    except (LookupError, TypeError):  # rot13's decoder takes str, not bytes
        raise InputError(f"unknown encoding {encoding!r}: name a text encoding such as utf-8 or latin-1") from None


def read_up_to(stream: BinaryIO, size: int, name: str) -> bytes:
    """Up to `size` bytes of `stream`: fewer only at its end, however a pipe delivers them."""
    pieces, got = [], 0
    try:
        while got < size and (piece := stream.read(size - got)):
            pieces.append(piece)
            got += len(piece)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    return b"".join(pieces)


def decoded_blocks(stream: BinaryIO, head: bytes, name: str, encoding: str | None,
                   read: TextRead) -> Iterator[tuple[str, int]]:
    """(text, bytes read so far) for each block of `stream`, whose first `head` bytes were read already; `name` is
    the input's in messages. Raises InputError for binary data and for bytes the codec refuses outright."""
    replaced = 0

    def count_and_replace(exc: UnicodeDecodeError):
        nonlocal replaced
        read.replaced_bytes += exc.end - exc.start
        replaced += 1
        return "\ufffd", exc.end

    codecs.register_error("locret-count", count_and_replace)
    digest = hashlib.sha256()
    block = head + read_up_to(stream, READ_BYTES - len(head), name)
    read.encoding = chosen = _choose_encoding(encoding, block)
    decoder = codecs.getincrementaldecoder(chosen)(errors="locret-count")
    wide = codecs.lookup(chosen).name.startswith(WIDE_ENCODINGS)
    judged = None
    while block:
        if not wide and block.count(0) > BINARY_NUL_SHARE * len(block):
            raise InputError(f"{name} holds binary data (NUL bytes after byte {read.size_bytes:,}), not text; "
                             "pass --encoding if it is UTF-16 or UTF-32")
        digest.update(block)
        before = replaced
        text = _decode(decoder, block, name, chosen)
        counts = (read.size_bytes, len(text), replaced - before, len(ODD_CHARACTERS.findall(text)))
        judged = counts if judged is None or counts[1] >= JUDGED_CHARS else _pooled(judged, counts)
        _refuse_binary(name, chosen, *judged)
        read.size_bytes += len(block)
        if text:
            yield text, read.size_bytes
        block = read_up_to(stream, READ_BYTES, name)
    tail = _decode(decoder, b"", name, chosen, final=True)
    if tail:
        yield tail, read.size_bytes
    read.sha256 = digest.hexdigest()


def _pooled(before: tuple[int, int, int, int], after: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """The counts (start, characters, replaced, odd) of two blocks in a row, taken as one."""
    return before[0], before[1] + after[1], before[2] + after[2], before[3] + after[3]


def _refuse_binary(name: str, chosen: str, start: int, chars: int, replaced: int, odd: int) -> None:
    """Raise if the text decoded from byte `start` on (`chars` characters, `replaced` of them U+FFFD for undecodable
    bytes, `odd` of them `ODD_CHARACTERS`) is binary data rather than text."""
    if replaced > BINARY_REPLACED_SHARE * chars:
        why = f"{replaced / chars:.0%} of the characters after byte {start:,} are not valid {chosen}"
    elif odd > BINARY_ODD_SHARE * chars:
        why = f"{odd / chars:.0%} of the characters after byte {start:,} are control or private-use characters"
    else:
        return
    raise InputError(f"{name} holds binary data ({why}), not text; pass --encoding if it is text in another encoding")


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
        raise InputError(f"{name} cannot be read as {chosen}: {exc}") from None


def _sniff_encoding(head: bytes) -> str:
    for bom, name in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                      (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if head.startswith(bom):
            return name
    return "utf-8"
