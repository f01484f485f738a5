"""A GGUF file's header, parsed within bounds: every length, count and nesting depth it claims is checked against
the bytes left in the file before it is used, so a hostile header costs no more than its size to refuse.

The layout (GGUF versions 2 and 3): magic, version, tensor count, pair count; the pairs (key string, value type,
value; arrays hold an item type, a count and the items); each tensor's name, dimensions, type and data offset; then
the tensors' data, aligned. `values` reads the pairs up to the last key wanted, skipping the others unparsed;
`check_layout` reads the whole header as gguf's `GGUFReader` (which transformers loads with) does, and refuses what
that reader would fail on or trust past the file's end. Both raise ValueError saying what is wrong.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # the ones gguf's reader reads
STRING, ARRAY = 8, 9  # value types
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}  # type: struct
UINT32 = 4
MAX_DEPTH = 8  # arrays of arrays nested deeper than this are refused (real files nest none)
MAX_NAME = 65535  # bytes in a key or a tensor name
MAX_DIMS = 4  # GGML_MAX_DIMS
LARGEST_DIMENSION = 2 ** 63  # numpy's arrays, which gguf's reader maps tensors as, have no larger one (even when empty)
DEFAULT_ALIGNMENT = 32
READER_FIELDS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")  # names gguf's reader gives the counts


class Header:
    """A cursor over a GGUF file's bytes that refuses any read past their end."""

    def __init__(self, data: bytes | mmap.mmap):
        self.data, self.at, self.order = data, 0, "<"
        if bytes(data[:4]) != MAGIC:
            raise ValueError("no GGUF magic at the start")
        self.at = 4
        version = self.number("I", "the version")
        if not version & 0xFFFF:  # a big-endian file's version reads byte-swapped
            self.order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in VERSIONS:
            raise ValueError(f"GGUF version {version}; locret reads versions {' and '.join(map(str, VERSIONS))}")
        self.tensors, self.pairs = self.number("Q", "the tensor count"), self.number("Q", "the pair count")
        if self.pairs * 13 > self.left():  # the smallest pair: an empty key, its type and one byte
            raise ValueError(f"it claims {self.pairs:,} key-value pairs, more than its {len(data):,} bytes hold")

    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, size: int, what: str) -> int:
        """Step over `size` bytes of `what`; returns where they start."""
        if size > self.left():
            raise ValueError(f"the header ends inside {what}")
        start, self.at = self.at, self.at + size
        return start

    def number(self, code: str, what: str):
        start = self.take(struct.calcsize(code), what)
        return struct.unpack_from(self.order + code, self.data, start)[0]

    def text(self, what: str, longest: int | None = None) -> bytes:
        size = self.number("Q", what)
        if longest is not None and size > longest:
            raise ValueError(f"{what} of {size:,} bytes; GGUF allows {longest:,}")
        start = self.take(size, what)
        return bytes(self.data[start:start + size])

    def name(self, what: str) -> str:
        try:
            return self.text(what, MAX_NAME).decode()
        except UnicodeDecodeError:
            raise ValueError(f"{what} is not UTF-8 text") from None

    def value(self, kind: int, depth: int = 0):
        """The scalar or string value of type `kind` next; an array is stepped over (None)."""
        if kind in SCALARS:
            return self.number(SCALARS[kind], "a value")
        if kind == STRING:
            return self.text("a string")
        if kind != ARRAY:
            raise ValueError(f"unknown value type {kind}")
        if depth >= MAX_DEPTH:
            raise ValueError(f"arrays nested more than {MAX_DEPTH} deep")
        item, count = self.number("I", "an array"), self.number("Q", "an array")
        least = struct.calcsize(SCALARS[item]) if item in SCALARS else {STRING: 8, ARRAY: 12}.get(item)
        if least is None:
            raise ValueError(f"an array of unknown value type {item}")
        if count * least > self.left():
            raise ValueError(f"an array of {count:,} items runs past the end of the file")
        if item in SCALARS:
            self.take(count * least, "an array")
        elif item == STRING:
            self.strings(count)
        else:
            for _ in range(count):
                self.value(item, depth + 1)
        return None

    def strings(self, count: int) -> None:
        """Step over `count` strings (a vocabulary of 262,144 tokens takes a tenth of a second)."""
        length, data, at, end = struct.Struct(self.order + "Q").unpack_from, self.data, self.at, len(self.data)
        for _ in range(count):
            if at + 8 > end or (at := at + 8 + length(data, at)[0]) > end:
                raise ValueError("the header ends inside a string")
        self.at = at


@contextmanager
def _header(path: Path) -> Iterator[Header]:
    """The file's header, over its bytes mapped into memory (an empty file's cannot be) while the block runs."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            yield Header(b"")
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            yield Header(data)


def values(path: Path, keys: tuple[str, ...]) -> dict:
    """`keys`' scalar and string values (strings decoded) in the header, read up to the last one found."""
    found: dict = {}
    with _header(path) as header:
        for _ in range(header.pairs):
            if len(found) == len(keys):
                break
            key, kind = header.name("a key"), header.number("I", "a value type")
            value = header.value(kind)
            if key in keys and kind != ARRAY:
                try:
                    found[key] = value.decode() if kind == STRING else value
                except UnicodeDecodeError:
                    raise ValueError(f"{key} is not UTF-8 text") from None
    return found


def check_layout(path: Path) -> None:
    """Read the whole header as gguf's reader does: no key twice, an alignment that is a power of two, each tensor
    named once, of at most 4 dimensions and a known type, with its data inside the file."""
    from gguf import GGML_QUANT_SIZES

    with _header(path) as header:
        _check_layout(header, {int(kind): block for kind, block in GGML_QUANT_SIZES.items()})


def _check_layout(header: Header, sizes: dict[int, tuple[int, int]]) -> None:
    """`check_layout` of an open header; `sizes`: each tensor type's (elements, bytes) per block."""
    keys, alignment = set(READER_FIELDS), DEFAULT_ALIGNMENT
    for _ in range(header.pairs):
        key, kind = header.name("a key"), header.number("I", "a value type")
        if key in keys:
            raise ValueError(f"the key {key!r} appears twice")
        keys.add(key)
        value = header.value(kind)
        if key == "general.alignment":
            if kind != UINT32 or value < 1 or value & (value - 1):
                raise ValueError("general.alignment is not a power of two held in a uint32")
            alignment = value
    if header.tensors * 24 > header.left():  # the smallest tensor entry: an empty name, no dimensions, type, offset
        raise ValueError(f"it claims {header.tensors:,} tensors, more than its bytes hold")
    extents: dict[str, tuple[int, int]] = {}
    for _ in range(header.tensors):
        name, dims = header.name("a tensor name"), header.number("I", "a tensor")
        if dims > MAX_DIMS:
            raise ValueError(f"tensor {name!r} has {dims} dimensions; GGUF allows {MAX_DIMS}")
        shape = [header.number("Q", "a tensor") for _ in range(dims)]
        if any(size >= LARGEST_DIMENSION for size in shape):
            raise ValueError(f"tensor {name!r} has a dimension of 2⁶³ or more")
        kind, offset = header.number("I", "a tensor"), header.number("Q", "a tensor")
        if name in extents:
            raise ValueError(f"the tensor {name!r} appears twice")
        if kind not in sizes:
            raise ValueError(f"tensor {name!r} has unknown type {kind}")
        block, block_bytes = sizes[kind]
        if block > 1 and (not shape or shape[0] % block):
            raise ValueError(f"tensor {name!r}: its rows do not fill its type's blocks of {block}")
        extents[name] = (offset, math.prod(shape) * block_bytes // block)
    start = -(-header.at // alignment) * alignment
    for name, (offset, size) in extents.items():
        if start + offset + size > len(header.data):
            raise ValueError(f"tensor {name!r}: its data runs past the end of the file")
