"""Refusing by meaning, offline: window sentences, and the pardon of an answer the lexical check withholds."""

from __future__ import annotations

import pytest

from locret_cli.checks import grounding
from locret_cli.checks.grounding import DocumentText, ground
from research.meaning_refusal import common_words, report, sentences, vocabulary_words


def row(kind, verdict, fit, wrefused=False, answerable=0.9):
    refused = "right" if kind == "not-stated" else "none"
    return {"kind": kind, "verdict": verdict, "wrefused": wrefused, "answerable": answerable,
            "not_stated_verdict": refused, "answer_fit": fit, "missing": ["x"] if wrefused else [],
            "answer": "an answer"}


def test_sentences_are_cut_at_stops_and_lines_and_paired_with_their_neighbours():
    assert sentences("The gate is red. It opens at six.\nport: 8080\n\nok") == [
        "The gate is red.", "It opens at six.", "port: 8080",
        "The gate is red. It opens at six.", "It opens at six. port: 8080"]


def test_a_pardon_keeps_withheld_answers_that_fit_a_window_sentence(capsys):
    rows = [row("paraphrase", "right", 0.7, wrefused=True), row("not-stated", "made_up", 0.4, wrefused=True),
            row("lookup", "right", 0.9, answerable=0.5), row("detail", "right", 0.8)]
    report(rows, (0.6,), 0.725)
    lines = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    assert lines["as said"] == "| as said | 3/4 | 1 | 0 | 0/1 | 1/1, 0/1, 1/1, 1/1 |"
    lexical = lines["the windows lack its words"]
    assert lexical == "| the windows lack its words | 3/4 | 0 | 0 | 1/1 | 0/1, 1/1, 1/1, 1/1 |"
    pardoned = lines["lacking words and answer fit < 0.6"]  # the paraphrase fits at 0.7: kept; the made-up one not
    assert pardoned == "| lacking words and answer fit < 0.6 | 4/4 | 0 | 0 | 1/1 | 1/1, 1/1, 1/1, 1/1 |"
    both = lines["lacking words and answerable < 0.725"]  # no row is both: nothing refused
    assert both == "| lacking words and answerable < 0.725 | 3/4 | 1 | 0 | 0/1 | 1/1, 0/1, 1/1, 1/1 |"


class Vocabulary:
    def get_vocab(self):
        return {"Ġthe": 1, "Ġstopped": 2, "ĠAfrica": 3, "Ġ42": 4, "stopped": 5, "Ġx": 6, "Ġreceived": 900}


def test_vocabulary_words_are_lowercase_whole_words_among_the_first_ids():
    assert vocabulary_words(Vocabulary(), 100) == {"the", "stopped"}
    assert vocabulary_words(Vocabulary(), 1000) == {"the", "stopped", "received"}


def test_common_words_let_an_ordinary_word_pass_and_are_restored_even_after_an_error():
    read = DocumentText(["Prompts no longer get a trailing space in 8.3.1."], [""])
    answer = "In 8.3.1, prompts stopped getting a trailing space."
    assert ground("When did prompts lose the trailing space?", answer, read).status == "not_found"
    with common_words(frozenset({"stopped", "getting"})):
        assert ground("When did prompts lose the trailing space?", answer, read).status != "not_found"
    saved = grounding.COMMON
    with pytest.raises(RuntimeError), common_words(frozenset({"stopped"})):
        raise RuntimeError
    assert grounding.COMMON is saved and "stopped" not in saved
