"""grounding_rates' report counts what it says: made-up answers that got through, right answers withheld, and
where the top source points."""

from __future__ import annotations

from benchmarks.grounding_rates import holds_words, report


def row(kind, right=False, refused=False, withheld=None, top=False, attention=False, status="found"):
    return {"kind": kind, "right": right, "refused": refused, "withheld": withheld, "grounding": {"status": status},
            "top_source_holds_value": top, "top_attention_holds_value": attention}


def test_the_rates_count_the_rows_they_name():
    rows = [row("answerable", right=True, top=True), row("answerable", right=True, top=True, attention=True),
            row("answerable", right=True, refused=True, withheld="The code is 12."), row("answerable"),
            row("near_miss", refused=True), row("near_miss", status="n/a"), row("off_form", refused=True)]
    text = report(rows)
    assert "- made-up answers that got through: 33.3% (1/3), of which without any content (n/a): 1" in text
    assert "- right answers flagged (withheld): 33.3% (1/3)" in text
    assert "- answerable questions answered right after the check: 50.0% (2/4)" in text
    assert "top source holds the value: 100.0% (2/2); whose most-attended source does: 50.0% (1/2)" in text
    assert "| near_miss | 2 | 50.0% (1/2) | 50.0% (1/2) |" in text


def test_a_right_answer_holds_the_values_words_whole():
    assert holds_words("The access code is Biscuit.", "biscuit")
    assert not holds_words("The access code is biscuited.", "biscuit")
    assert holds_words("It is Ingrid Halvorsen's", "Ingrid Halvorsen")
