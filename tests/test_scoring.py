"""Answers scored by binding: right only with the asked value and no other candidate; a list of candidates and
another entity's value are bound wrong; a value the document does not hold is made up."""

from __future__ import annotations

import pytest

from locret_cli.bench.scoring import tally, verdict
from locret_cli.bench.tasks import Question
from locret_cli.checks.grounding import DocumentText

TEXT = DocumentText(["The gate code of the north depot is 4821. The radio channel of the north depot is 7762. "
                     "The annual meeting was held in 1999. The harbour pilot is Kwame. The lock keeper is Ingrid."],
                    ["p. 1"])
GATE = Question("What is the gate code of the north depot?", "4821", candidates=("7762", "1999"))
KEEPER = Question("Who is the lock keeper?", "Ingrid", candidates=("Kwame",))
UNSTATED = Question("What is the gate code of the south depot?", "", candidates=("4821", "7762"))


@pytest.mark.parametrize("question, answer, expected", [
    (GATE, "The gate code of the north depot is 4821.", "right"),
    (GATE, "4821", "right"),
    (GATE, "4821, 7762 or 1999.", "bound_wrong"),  # a list of candidates
    (GATE, "It is 4821 or 7762.", "bound_wrong"),
    (GATE, "The gate code of the north depot is 7762.", "bound_wrong"),
    (GATE, "The gate code of the north depot is 5190.", "made_up"),
    (GATE, "The gate code of the north depot is 48210.", "made_up"),  # a longer number is another number
    (GATE, "I cannot tell.", "none"),
    (GATE, "The document does not say.", "none"),
    (KEEPER, "The harbour pilot is Kwame.", "bound_wrong"),  # another entity's role
    (KEEPER, "The lock keeper is Ingrid.", "right"),
    (UNSTATED, "The document does not say.", "right"),
    (UNSTATED, "It is not stated.", "right"),
    (UNSTATED, "The gate code of the south depot is 4821.", "bound_wrong"),
    (UNSTATED, "The gate code of the south depot is the harbour pilot.", "bound_wrong"),  # the document's words
    (UNSTATED, "The gate code of the south depot is 3141.", "made_up"),
    (UNSTATED, "According to the passage, the gate code of the south depot is 4821.", "bound_wrong"),  # not made up
])
def test_each_answer_gets_its_verdict(question, answer, expected):
    assert question.verdict(answer, TEXT) == expected


def test_every_part_must_be_there_in_one_of_its_forms():
    multi = Question("What are the codes?", "1111", parts=("2222",), alternatives=("one-one",))
    assert multi.verdict("1111 and 2222", TEXT) == "right"
    assert multi.verdict("one-one and 2222", TEXT) == "right"
    assert multi.verdict("1111 only", TEXT) == "made_up"  # 1111 is not in TEXT


def test_without_the_text_nothing_is_called_made_up():
    assert verdict("It is 5190.", [("4821",)], ("7762",)) == "none"
    assert verdict("It is 7762.", [("4821",)], ("7762",)) == "bound_wrong"


def test_tally_names_every_verdict():
    assert tally(["right", "right", "made_up"]) == {"right": 2, "bound_wrong": 0, "made_up": 1, "none": 0}
