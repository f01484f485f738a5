"""Grounding binds a value to what the question asks: a neighbour's value, a list of candidates, a negated sentence
and an answer that states nothing are not grounded; a right answer is, whether it restates the question or says yes
or no."""

from __future__ import annotations

import pytest

from locret_cli.api.answer_checks import untrusted
from locret_cli.checks.grounding import DocumentText, ground

DEPOT = DocumentText(["The gate code of the north depot is 4821. The radio channel of the north depot is 7762. "
                      "The annual meeting was not held in 1999."], ["p. 1"])
FAR = DocumentText(["Nobody remembers why the old surveyor carried a pile of maps by The pass key is 60494."], ["p. 1"])
HALL = DocumentText(["The annual meeting was held in 1999 in the town hall. The harbour pilot is Kwame."], ["p. 1"])
GATE = "What is the gate code of the north depot?"
YEAR = "In which year was the annual meeting held?"
HELD = "Was the annual meeting held in 1999?"


@pytest.mark.parametrize("text, question, answer, grounded", [
    (DEPOT, GATE, "The gate code of the north depot is 4821.", True),
    (DEPOT, GATE, "It is 4821.", True),
    (DEPOT, GATE, "The gate code of the north depot is 7762.", False),  # the radio channel's value
    (DEPOT, "What is the radio channel of the north depot?", "It is 7762.", True),
    (DEPOT, GATE, "Either 4821. Or 7762. Or 1999.", False),
    (DEPOT, GATE, "It is 4821 or 7762.", False),
    (DEPOT, YEAR, "The annual meeting was held in 1999.", False),  # the document says it was not
    (HALL, YEAR, "The annual meeting was held in 1999.", True),
    (HALL, YEAR, "1999.", True),
    (HALL, YEAR, "The annual meeting was not held in 1999.", False),
    (HALL, HELD, "Yes, the annual meeting was held in 1999.", True),
    (HALL, HELD, "Yes.", True),
    (HALL, HELD, "No.", False),
    (DEPOT, HELD, "No, it was not.", True),
    (DEPOT, HELD, "Yes.", False),
    (HALL, "Was the annual meeting held in 2005?", "Yes.", False),  # no sentence states it
    (FAR, "What is the pass key?", "The pass key is 60494.", True),  # the sentence's negation is far from the value
])
def test_a_value_grounds_only_where_the_document_says_it_of_what_was_asked(text, question, answer, grounded):
    assert ground(question, answer, text).grounded == grounded


def test_a_neighbours_value_is_found_but_unbound():
    grounding = ground(GATE, "The gate code of the north depot is 7762.", DEPOT)
    assert (grounding.status, [(s.text, s.status) for s in grounding.spans]) == ("partial", [("7762", "unbound")])


def test_a_polar_answer_names_the_page_that_states_its_claim():
    grounding = ground(HELD, "Yes, the annual meeting was held in 1999.", HALL)
    assert (grounding.status, [(s.text, s.status, s.places) for s in grounding.spans]) == (
        "found", [("yes", "found", ["p. 1"])])


@pytest.mark.parametrize("answer", ["No.", "It is not known.", "The gate code is not given."])
def test_strict_withholds_an_answer_that_states_nothing(answer):
    grounding = ground(GATE, answer, DEPOT)
    assert grounding.status == "n/a"
    assert untrusted(None, GATE, answer, grounding)


def test_strict_keeps_a_grounded_answer_and_its_own_refusal():
    assert not untrusted(None, GATE, "It is 4821.", ground(GATE, "It is 4821.", DEPOT))
    refusal = "The document does not say."
    assert not untrusted(None, GATE, refusal, ground(GATE, refusal, DEPOT))


FAIR = DocumentText(["The spring fair was not held in Oslo; it was held in Bergen. The autumn fair was not held in "
                     "Molde, Bodø or Alta."], ["p. 1"])
CREW = DocumentText(["The lock keeper is Ingrid and the harbour pilot is Kwame. The ferry master, who joined in 1990, "
                     "is Tove. The timeout, which defaults to 30 seconds, can be changed."], ["p. 1"])
SPRING, PILOT, KEEPER = "Where was the spring fair held?", "Who is the harbour pilot?", "Who is the lock keeper?"


@pytest.mark.parametrize("question, answer, grounded", [
    (SPRING, "Bergen.", True),  # the negation's reach ends at the semicolon
    (SPRING, "It was held in Bergen.", True),
    (SPRING, "Oslo.", False),
    (SPRING, "It was held in Oslo.", False),
    (SPRING, "It was not held in Oslo.", True),
    ("Where was the autumn fair held?", "Bodø.", False),  # a list after a negation is denied whole
])
def test_a_value_after_a_negation_and_a_semicolon_is_bound_and_the_negated_one_is_not(question, answer, grounded):
    assert ground(question, answer, FAIR).grounded == grounded


@pytest.mark.parametrize("question, answer, grounded", [
    (PILOT, "Kwame.", True),
    (PILOT, "The harbour pilot is Kwame.", True),
    (PILOT, "Ingrid.", False),  # the lock keeper's name, in the sentence that names the harbour pilot
    (PILOT, "The harbour pilot is Ingrid.", False),
    (KEEPER, "Ingrid.", True),
    (KEEPER, "Kwame.", False),
    ("Who is the ferry master?", "Tove.", True),  # a clause between the thing and its value gives no other thing
    ("What is the timeout?", "30 seconds.", True),
])
def test_a_name_the_sentence_gives_another_thing_is_not_bound_to_the_one_asked(question, answer, grounded):
    assert ground(question, answer, CREW).grounded == grounded
