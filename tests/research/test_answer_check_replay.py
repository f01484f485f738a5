"""The answer-check replay's report: an answer refused below a threshold takes its not-stated verdict, by kind."""

from __future__ import annotations

import json

from research.answer_check_replay import report


def row(kind, verdict, answerable, wrefused=False):
    refused = "right" if kind == "not-stated" else "none"  # what the refusal scores for this question
    return {"kind": kind, "verdict": verdict, "wrefuse_verdict": refused if wrefused else verdict,
            "wrefused": wrefused, "stated": 0.9, "answerable": answerable, "not_stated_verdict": refused}


def test_a_fixed_threshold_refuses_below_it_and_counts_by_kind(tmp_path, capsys):
    rows = [row("lookup", "right", 0.9), row("lookup", "right", 0.6), row("not-stated", "made_up", 0.4),
            row("not-stated", "made_up", 0.8, wrefused=True), row("paraphrase", "bound_wrong", 0.3)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(path, (0.65,))
    lines = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    shipped = lines["windows lack its words (shipped)"]
    assert shipped == "| windows lack its words (shipped) | 3/5 | 1 | 1 | 1/2 | 2/2, 1/2, 0/1 |"
    fixed = lines["shipped, or answerable < 0.65"]  # the lookup at 0.6 and both others under 0.65 are refused
    assert fixed == "| shipped, or answerable < 0.65 | 3/5 | 0 | 0 | 2/2 | 1/2, 2/2, 0/1 |"
