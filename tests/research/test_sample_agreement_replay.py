"""Sample agreement as a refusal signal, offline: an answer's new words said again by its samples, and the report's
rules on stored rows."""

from __future__ import annotations

import json

from research.sample_agreement_replay import agreement, new_words, report


def test_new_words_leave_out_the_question_and_common_words():
    assert new_words("Which country did Graham visit?", "Graham visited Kenya in 2019.") == {"visited", "kenya", "2019"}


def test_agreement_is_the_mean_share_of_the_answer_s_new_words_each_sample_says():
    question = "Which country did Graham visit?"
    assert agreement(question, "Kenya.", ["Kenya.", "He went to Kenya."]) == 1.0
    assert agreement(question, "Kenya.", ["Tanzania.", "Kenya."]) == 0.5
    assert agreement(question, "Kenya in 2019.", ["Kenya, 2018.", "Tanzania."]) == 0.25
    assert agreement(question, "Graham.", ["Tanzania."]) == 1.0  # no new words: nothing to disagree with
    assert agreement(question, "Kenya.", []) == 1.0


def row(kind, verdict, answer, samples, wrefused=False, answerable=0.9):
    refused = "right" if kind == "not-stated" else "none"
    return {"kind": kind, "question": "What is the timeout?", "answer": answer, "samples": samples,
            "verdict": verdict, "wrefused": wrefused, "answerable": answerable, "not_stated_verdict": refused}


def test_the_report_refuses_answers_whose_samples_disagree(tmp_path, capsys):
    rows = [row("lookup", "right", "30 seconds.", ["30 seconds.", "30 seconds."]),
            row("not-stated", "made_up", "10 seconds.", ["60 seconds.", "5 minutes."]),
            row("paraphrase", "right", "Underscores.", ["Underscores.", "Dashes."], wrefused=True),
            row("detail", "right", "8.3.1.", ["8.3.1."], answerable=0.5)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(path, (0.75,), 0.725)
    lines = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    assert lines["as said"] == "| as said | 3/4 | 1 | 0 | 0/1 | 1/1, 0/1, 1/1, 1/1 |"
    # agreements: 1.0, 0.0 ("10" said by neither sample; "seconds" by one: (1/2 + 0) / 2 = 0.25), 0.5, 1.0
    assert lines["agreement < 0.75"] == "| agreement < 0.75 | 3/4 | 0 | 0 | 1/1 | 1/1, 1/1, 0/1, 1/1 |"
    assert lines["lacking words and agreement < 0.75"] == (
        "| lacking words and agreement < 0.75 | 2/4 | 1 | 0 | 0/1 | 1/1, 0/1, 0/1, 1/1 |")
    assert lines["shipped, or agreement < 0.75"] == (
        "| shipped, or agreement < 0.75 | 2/4 | 0 | 0 | 1/1 | 1/1, 1/1, 0/1, 0/1 |")
