"""JSON Lines input: each non-blank line parsed, a bad one named by its line number."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from locret_cli.errors import LocretError


def jsonl_records(lines: Iterable[str], label: str) -> Iterator[tuple[int, object]]:
    """(1-based line number, parsed value) for each non-blank line of `lines`. A line that is not JSON raises a
    one-line LocretError: "<label> line N is not valid JSON (why)"."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise LocretError(f"{label} line {number} is not valid JSON ({exc.msg})") from None
