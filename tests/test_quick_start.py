"""The README's Quick start promise: the embedded model answers the sample handbook's question and cites p. 10."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from locret_cli.cli import app


def test_the_quick_start_question_is_answered_from_page_10():
    result = CliRunner().invoke(app, ["ask", "samples/handbook.pdf", "What is the gate code of the north depot?",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["answer"] == "The gate code of the north depot is 4821."
    assert report["sources"][0] == {**report["sources"][0], "page": 10, "holds_answer": True}
