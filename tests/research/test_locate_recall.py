"""Locating rules for the recall measure: the question's BM25, and BM25 with the model's closed-book answer (HyDE)."""

from __future__ import annotations

import json

from locret_cli.checks.grounding import words
from locret_cli.core.answer.passage_rank import bm25_scores
from research.locate_recall import hypotheses, ranks, rule_windows

PASSAGES = ["the parser reads options from the command line",
            "retries happen after a pause of thirty seconds",
            "colours are set by the theme of the console",
            "the network timeout defaults to thirty seconds here"]
SPANS = [(0, 10), (10, 20), (20, 30), (30, 40)]


def scores_for(question: str, answer: str) -> dict[str, list[float]]:
    passage_words = [words(p) for p in PASSAGES]
    return {"bm25": bm25_scores(passage_words, words(question)),
            "hyde": bm25_scores(passage_words, words(f"{question} {answer}"))}


def test_the_closed_book_answer_locates_a_passage_the_question_s_words_miss():
    scores = scores_for("How long does it wait before giving up on the server?", "The network timeout is 60 seconds.")
    assert rule_windows("bm25", scores, SPANS, 1, 10, 40) == []  # no word of the question is in a passage
    assert rule_windows("hyde", scores, SPANS, 1, 10, 40) == [(30, 40)]


def test_bm25_then_hyde_keeps_the_question_s_windows_and_adds_the_hypothesis_s():
    scores = scores_for("Who reads the command line options?", "The network timeout is thirty seconds.")
    assert rule_windows("bm25", scores, SPANS, 2, 10, 40) == [(0, 10)]
    assert rule_windows("bm25+hyde", scores, SPANS, 2, 10, 40) == [(0, 10), (30, 40)]


def test_hypotheses_are_read_by_document_and_question(tmp_path):
    rows = [{"document": "rich", "question": "Q1?", "answer": "A one."},
            {"document": "click", "question": "Q1?", "answer": "A two."}]
    path = tmp_path / "closed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert hypotheses(path) == {("rich", "Q1?"): "A one.", ("click", "Q1?"): "A two."}
    assert hypotheses(None) == {}


def test_ranks_break_ties_in_document_order():
    assert ranks([0.5, 2.0, 0.5, 1.0]) == [2, 0, 3, 1]
