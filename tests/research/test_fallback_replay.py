"""research/fallback_replay.py: the bounded cache's answer stands in only where the shipped route refuses."""

from __future__ import annotations

import json

import pytest

from research.fallback_replay import falls_back, joined_rows

SHIPPED = (lambda r: r["wrefused"] or r["answerable"] < 0.7)


def window_row(question: str, verdict: str, wrefused: bool = False, answerable: float = 0.9) -> dict:
    return {"set": "natural-validation", "rule": "bm25", "question": question, "kind": "lookup", "verdict": verdict,
            "wrefused": wrefused, "answerable": answerable, "not_stated_verdict": "none"}


def test_an_answer_the_route_keeps_stays_and_a_refused_one_is_the_caches():
    kept = {**window_row("q", "bound_wrong"), "cache": "right"}
    assert falls_back(kept, SHIPPED) == kept
    checked = {**window_row("q", "right", answerable=0.5), "cache": "made_up"}
    assert falls_back(checked, SHIPPED) == {**checked, "verdict": "made_up", "fell": True}
    unfound = {**window_row("q", "made_up", wrefused=True), "cache": "right"}
    assert falls_back(unfound, lambda r: r["answerable"] < 0.7) == unfound  # a rule that does not refuse it


def test_rows_join_by_question_within_one_half_and_a_missing_one_is_an_error(tmp_path):
    windows, cache = tmp_path / "w.jsonl", tmp_path / "c.jsonl"
    windows.write_text("".join(json.dumps(r) + "\n" for r in (
        window_row("a", "right"), {**window_row("b", "none"), "rule": "mixed"},
        {**window_row("a", "none"), "set": "natural"})))
    rows = [{"set": "natural-validation", "config": "one-read", "question": "a", "verdict": "made_up",
             "refuse_verdict": "none"},
            {"set": "natural", "config": "one-read", "question": "a", "verdict": "right", "refuse_verdict": "right"},
            {"set": "natural-validation", "config": "windows", "question": "a", "verdict": "right",
             "refuse_verdict": "right"}]
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [row] = joined_rows(windows, cache, "natural-validation")
    assert (row["verdict"], row["cache"]) == ("right", "none")
    cache.write_text(json.dumps(rows[1]) + "\n")
    with pytest.raises(SystemExit, match="1 questions have no bounded-cache row"):
        joined_rows(windows, cache, "natural-validation")
