"""The JSON header of a `.locret` file (`saved_context.py`): the fields it must hold, the digest that covers it, and
`read_header`, which reads and checks it without loading the file's tensors.

`header_sha256` is the SHA-256 of the header's canonical JSON (keys sorted, no spaces, that field left out). The
header holds `tensors_sha256`, the digest of every tensor, so the one digest covers the header and the tensors: a
reader checks it before using any field, and the tensors against `tensors_sha256` before using any tensor. The
fields are then checked too (`check_fields`), for a file written with a bug or crafted with digests to match.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path

from safetensors import SafetensorError, safe_open

from locret_cli import __version__
from locret_cli.errors import InputError, SettingError
from locret_cli.models.file_checks import (
    MODEL_SHAPE,
    checked,
    list_of,
    maybe,
    number,
    one_of,
    plain,
    record,
    text,
    whole,
)
from locret_cli.settings import ReadSettings

FORMAT, VERSION = "locret-context", 3
DIGEST = "header_sha256"
ENGINE_COUNTS = ("seen", "document_tokens", "kept_tokens", "peak_tokens", "peak_bytes")
SETTING_CHECKS = {"int": whole(None), "float": number(), "str": text}  # by annotation; the bounds come after
HEADER_FIELDS = record({
    "format": text, "version": whole(), "locret": text,
    "model": record({"name": text, "shape": MODEL_SHAPE, "dtype": text, "weights_sha256": text}),
    "tokenizer": record({"vocab_size": whole(1), "sha256": text}),
    "heads": maybe(record({"sha256": text})),
    "settings": record({spec.name: SETTING_CHECKS[spec.type] for spec in fields(ReadSettings)}),
    "prefix_ids": list_of(whole()),
    "engine": record({name: whole() for name in ENGINE_COUNTS}),
    "document": record({"name": text, "kind": one_of("pdf", "text"), "tokens": whole(), "pages": maybe(whole()),
                        "sha256": maybe(text), "size_bytes": maybe(whole()), "read_s": number(0)}),
    "units": one_of("page", "lines"),
    "tensors_sha256": text,
    DIGEST: text,
}, {"read_for": list_of(text)})


def header_digest(header: dict) -> str:
    """The SHA-256 of `header`'s canonical JSON, without its own digest field."""
    canonical = json.dumps({k: v for k, v in header.items() if k != DIGEST}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_digest(header: dict, path) -> None:
    """Refuse, in one line, a header that does not match the digest written with it."""
    try:
        digest = header_digest(header)
    except RecursionError:  # nested nearly as deep as json.loads allows, from deeper in the stack
        raise InputError(f"{path} is corrupted: its header nests too deeply") from None
    if header.get(DIGEST) != digest:
        raise InputError(f"{path} is corrupted: its header does not match the checksum written with it")


def check_fields(header: dict, path) -> None:
    """Refuse a header without a field locret writes, with one of the wrong type, with settings their own checks
    refuse (`ReadSettings.checked`), with engine counts that disagree, or prompt ids outside the vocabulary."""
    checked(header, HEADER_FIELDS, path, ".locret file")
    bad = f"{path} is not a valid .locret file"
    settings = ReadSettings(**header["settings"])
    try:
        if settings.checked() != settings:
            raise InputError(f"{bad}: its stabilizers ({settings.stabilizers}) do not fit in its budget "
                              f"({settings.budget})")
    except SettingError as exc:
        raise InputError(f"{bad}: its settings: {exc}") from None
    engine, prefix = header["engine"], header["prefix_ids"]
    if not len(prefix) <= engine["kept_tokens"] <= min(engine["document_tokens"], engine["peak_tokens"]) or \
            engine["document_tokens"] > engine["seen"]:
        counts = ", ".join(f"{name} {engine[name]}" for name in ENGINE_COUNTS[:4])
        raise InputError(f"{bad}: its counts disagree ({len(prefix)} prompt tokens, {counts})")
    if any(token >= header["tokenizer"]["vocab_size"] for token in prefix):
        raise InputError(f"{bad}: its prompt ids pass its tokenizer's vocabulary")


def read_header(path: str | Path) -> dict:
    """The JSON header of a `.locret` file, checked for format and version, then against its digest, then field by
    field (`context_header.py`); one-line LocretError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = json.loads((f.metadata() or {})["locret"])
    except (SafetensorError, OSError, KeyError, ValueError, RecursionError) as exc:
        raise InputError(f"{path} is not a readable .locret file (truncated or corrupted: "
                          f"{type(exc).__name__})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InputError(f"{path} is not a locret saved context")
    if header.get("version") != VERSION:
        raise InputError(f"{path} was written by locret {plain(header.get('locret', '?'))} in context format "
                          f"{plain(header.get('version'))}; this locret ({__version__}) reads format {VERSION}: read "
                          "the document again with `locret read`")
    check_digest(header, path)
    check_fields(header, path)
    return header
