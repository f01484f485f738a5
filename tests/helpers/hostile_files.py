"""Damaged copies of the files locret loads besides documents, made by the tests: `.locret` headers rewritten (with
their digest recomputed or not), heads and readers saved and then edited, and GGUF headers built byte by byte."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from locret_cli.api.context_header import DIGEST, header_digest
from locret_cli.api.saved_context import save_reading

UINT8, UINT32, STRING, ARRAY = 0, 4, 8, 9  # GGUF value types
needs_gguf = pytest.mark.skipif(not all(importlib.util.find_spec(name) for name in ("gguf", "accelerate")),
                                reason="GGUF support is the [gguf] extra: pip install 'locret-cli[gguf]'")
QUESTION = "What is the gate code of the north depot?"
ANSWER = "The gate code of the north depot is 4821."


def saved_depot(session, folder: Path) -> Path:
    """A `.locret` file, read by `session`, of a short document that holds ANSWER."""
    document = folder / "depot.txt"
    document.write_text(f"Notes of the depots.\n{ANSWER}\nThe south depot has none.\n" * 4)
    path = folder / "depot.locret"
    save_reading(session.read(str(document), {"budget": 64, "chunk_size": 64, "stabilizers": 16}), path,
                 session.heads)
    return path


def snapshot(folder: Path) -> dict[Path, bytes]:
    """Every file under `folder`, with its bytes."""
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def locret_header(path: Path) -> str:
    """The JSON text of a `.locret` file's header (its safetensors metadata "locret")."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + length])["__metadata__"]["locret"]


def with_header(source: Path, target: Path, text: str) -> Path:
    """Copy the `.locret` file `source` to `target` with `text` as its header, as it is."""
    data = source.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    outer = json.loads(data[8:8 + length])
    outer["__metadata__"]["locret"] = text
    encoded = json.dumps(outer).encode()
    encoded += b" " * (-len(encoded) % 8)
    target.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])
    return target


def signed(header: dict) -> str:
    """`header` as JSON with its digest recomputed: what a crafted file (or a bug of ours) would hold."""
    return json.dumps({**header, DIGEST: header_digest(header)})


def gguf_text(value: bytes) -> bytes:
    return struct.pack("<Q", len(value)) + value


def gguf_pair(key: str, kind: int, value: bytes) -> bytes:
    return gguf_text(key.encode()) + struct.pack("<I", kind) + value


def gguf_file(*pairs: bytes, tensors: int = 0, padding: int = 0) -> bytes:
    """A version-3 GGUF file of `pairs` (and that tensor count, with no tensor entries), then `padding` zero bytes."""
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, len(pairs)) + b"".join(pairs) + bytes(padding)


def nested_arrays(depth: int) -> bytes:
    """A GGUF array value: arrays of one array, `depth` deep, around an empty array of bytes."""
    return struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQ", UINT8, 0)


def tensor_entry(name: bytes, dims: list[int], kind: int = 0, offset: int = 0) -> bytes:
    """A GGUF tensor entry: name, dimensions, type (0: F32) and data offset."""
    return gguf_text(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)


ARCHITECTURE = gguf_pair("general.architecture", STRING, gguf_text(b"llama"))
