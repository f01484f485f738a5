"""Where a replay's answers are lost: the windows holding the answer, and each loss's place."""

from __future__ import annotations

from locret_cli.bench.tasks import Question
from research.row_audit import held, lost_to


def test_windows_hold_an_answer_said_whole_in_any_accepted_form():
    question = Question("How long is the timeout?", "30", alternatives=("thirty seconds",))
    assert held(["The default timeout is 30 s.", "other text"], question)
    assert held(["It waits for Thirty  Seconds."], question)
    assert not held(["It waits 300 ms."], question)


def row(verdict, wrefused=False, answerable=0.9):
    return {"verdict": verdict, "wrefused": wrefused, "answerable": answerable}


def test_a_loss_is_the_locating_s_the_reading_s_or_the_refusal_s():
    assert lost_to(row("right"), True, 0.725) is None
    assert lost_to(row("right"), False, 0.725) is None  # right from what the model knows: not a loss
    assert lost_to(row("made_up"), False, 0.725) == "locating"
    assert lost_to(row("bound_wrong"), True, 0.725) == "reading"
    assert lost_to(row("right", wrefused=True), True, 0.725) == "refusal"
    assert lost_to(row("right", answerable=0.7), True, 0.725) == "refusal"
    assert lost_to(row("right", answerable=0.7), True, 0.0) is None
    assert lost_to(row("right", wrefused=True), False, 0.725) == "locating"
