"""Reading locret's own files as untrusted input: JSON configs checked against the fields locret writes, and
safetensors files, each failure one LocretError line naming the file and what is wrong.

A field check (`Check`) takes a JSON value and the dotted name it sits at, and raises FieldError saying what that
field must be. `whole`, `number`, `text`, `one_of`, `maybe`, `list_of`, `map_of` and `record` build them; `checked`
runs one over a file's JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from locret_cli.core.identity import SAMPLES
from locret_cli.core.shape import ModelShape
from locret_cli.errors import ModelError

LARGEST = 2 ** 63  # whole numbers must fit in 64 signed bits: they become tensor sizes and positions


class FieldError(ValueError):
    """A JSON field that is missing or not what locret writes there; the message names the field."""


Check = Callable[[object, str], None]


def shown(value) -> str:
    """A JSON value as an error message shows it: in JSON, at most 40 characters."""
    try:
        return _cut(json.dumps(value))
    except RecursionError:  # nested nearly as deep as json.loads allows, from deeper in the stack
        return "a value nested too deeply to show"


def plain(value) -> str:
    """A JSON value as one short line of an error message: a string as it is (each run of spaces, newlines included,
    one space), anything else in JSON; at most 40 characters."""
    return _cut(" ".join(value.split())) if isinstance(value, str) else shown(value)


def _cut(line: str, longest: int = 40) -> str:
    return line if len(line) <= longest else line[:longest - 1] + "…"


def _refuse(where: str, must: str, value) -> FieldError:
    return FieldError(f"{where or 'the file'} must be {must}, got {shown(value)}")


def whole(minimum: int | None = 0) -> Check:
    """A whole number from `minimum` up (None: any), within 64 bits; true and false are not numbers."""
    def check(value, where: str) -> None:
        if (isinstance(value, bool) or not isinstance(value, int) or not -LARGEST <= value < LARGEST
                or (minimum is not None and value < minimum)):
            raise _refuse(where, "a whole number" + (f" of at least {minimum}" if minimum is not None else ""), value)
    return check


def number(minimum: float | None = None) -> Check:
    """A finite number (whole or not), at least `minimum` where one is given."""
    def check(value, where: str) -> None:
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or (minimum is not None and value < minimum)):
            raise _refuse(where, "a finite number" + (f" of at least {minimum:g}" if minimum is not None else ""),
                          value)
    return check


def text(value, where: str) -> None:
    """A string."""
    if not isinstance(value, str):
        raise _refuse(where, "a string", value)


def one_of(*choices) -> Check:
    """One of `choices`, of the same type (1.0 is not 1, true is not 1)."""
    def check(value, where: str) -> None:
        if not any(type(value) is type(choice) and value == choice for choice in choices):
            listed = ", ".join(shown(choice) for choice in choices)
            raise _refuse(where, listed if len(choices) == 1 else f"one of {listed}", value)
    return check


def maybe(inner: Check) -> Check:
    """null, or what `inner` accepts."""
    def check(value, where: str) -> None:
        if value is not None:
            inner(value, where)
    return check


def list_of(item: Check, length: int | None = None) -> Check:
    """A list of items `item` accepts; of exactly `length` items where one is given."""
    def check(value, where: str) -> None:
        if not isinstance(value, list) or (length is not None and len(value) != length):
            raise _refuse(where, "a list" + (f" of {length} items" if length is not None else ""), value)
        for index, element in enumerate(value):
            item(element, f"{where}[{index}]")
    return check


def map_of(item: Check) -> Check:
    """An object whose every value `item` accepts."""
    def check(value, where: str) -> None:
        if not isinstance(value, dict):
            raise _refuse(where, "an object", value)
        for key, element in value.items():
            item(element, _named(where, key))
    return check


def record(required: dict[str, Check], optional: dict[str, Check] | None = None, others: bool = False) -> Check:
    """An object with every `required` field, `optional` ones where present, and no other field unless `others`
    (fields locret writes but never reads back)."""
    optional = optional or {}

    def check(value, where: str) -> None:
        if not isinstance(value, dict):
            raise _refuse(where, "an object", value)
        missing = [key for key in required if key not in value]
        if missing:
            raise FieldError(f"{_named(where, missing[0])} is missing")
        unknown = sorted(set(value) - set(required) - set(optional))
        if unknown and not others:
            raise FieldError(f"{_named(where, unknown[0])} is not a field locret writes")
        for key, field_check in {**required, **optional}.items():
            if key in value:
                field_check(value[key], _named(where, key))
    return check


def _named(where: str, key: str) -> str:
    """The dotted name of field `key` inside `where`; a key that is not short printable text is shown in JSON."""
    name = key if key.isprintable() and len(key) <= 40 else shown(key)
    return f"{where}.{name}" if where else name


MODEL_SHAPE = record({spec.name: whole(1) for spec in fields(ModelShape)})
# `core/identity.py`'s record of the model that heads or a reader were trained for
IDENTITY = record({"shape": MODEL_SHAPE, "weight_samples": map_of(list_of(number(), SAMPLES))})


def checked(value, check: Check, path: Path, what: str):
    """`value` (JSON read from `path`), once `check` accepts it; else LocretError "PATH is not a valid WHAT: ..."."""
    try:
        check(value, "")
    except FieldError as exc:
        raise ModelError(f"{path} is not a valid {what}: {exc}") from None
    return value


def read_json(path: Path):
    """The JSON value in the file at `path`; LocretError where it cannot be read, is not UTF-8 or not JSON."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ModelError(f"{path} is not valid JSON: it is not UTF-8 text") from None
    except RecursionError:
        raise ModelError(f"{path} is not valid JSON locret writes: it nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers of more digits than Python converts
        raise ModelError(f"{path} is not valid JSON: {str(exc).splitlines()[0]}") from None


def read_tensors(path: Path, wanted: Callable[[str], object] | None = None) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file at `path` whose names `wanted` is true of (default: all); LocretError
    where the file is missing, truncated or garbled."""
    if not path.is_file():
        raise ModelError(f"{path} is missing")
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: f.get_tensor(name) for name in f.keys() if wanted is None or wanted(name)}
    except (SafetensorError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{path} is not a readable safetensors file (truncated or corrupted: {reason})") from None
