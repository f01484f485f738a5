"""reader_routes reads each document once: the natural task's two halves share one read of each document."""

from __future__ import annotations

import pytest

from benchmarks.reader_routes import reads
from locret_cli.bench import natural
from locret_cli.errors import SettingError


def test_the_natural_halves_share_one_read_of_each_document():
    try:
        test, validation = natural.load("test")[:2], natural.load("validation")[:2]
    except SettingError as exc:
        pytest.skip(f"a source of the natural documents is not installed as written against: {exc}")
    grouped = reads(None, ["natural", "natural-validation"], 0, 2, None)
    assert [index for index, *_ in grouped] == [0, 1]
    for (index, document, statements, asked), t, v in zip(grouped, test, validation, strict=True):
        assert document.name == t.name == v.name and statements == []
        assert [q.question for q in asked["natural"]] == [q.question for q in t.questions]
        assert [q.question for q in asked["natural-validation"]] == [q.question for q in v.questions]
    assert [sorted(asked) for *_, asked in reads(None, ["natural"], 0, 2, None)] == [["natural"], ["natural"]]
