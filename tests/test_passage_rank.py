"""`--locate bm25`: passages of the document's own tokens ranked by BM25 for the question's words, and windows
centred on the best of them, read again without the bounded read."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.pending_reads import SETTINGS, TEXT, WORDS

from locret_cli.core.answer.passage_rank import best_passages, bm25_scores, passage_signal, passage_spans

BM25 = replace(WORDS, locate="bm25")


def test_passages_cover_the_document_after_the_prompt_head_by_half_passages():
    assert passage_spans(10, 2, 4) == [(2, 6), (4, 8), (6, 10)]
    assert passage_spans(9, 2, 4) == [(2, 6), (4, 8), (6, 9)]
    assert passage_spans(3, 2, 4) == [(2, 3)]


def test_rarer_words_weigh_more_and_common_words_nothing():
    passages = [["lamp", "room", "vault"], ["lamp", "room", "door"], ["lamp", "room", "hall"], ["the", "of", "is"]]
    scores = bm25_scores(passages, ["the", "vault", "of", "the", "lamp"])
    assert scores[0] > scores[1] == scores[2] > 0 and scores[3] == 0
    assert bm25_scores(passages, ["the", "of"]) == [0.0] * 4  # nothing to look for


def test_a_words_repeats_add_less_and_less():
    once, twice, thrice = bm25_scores([["vault", "a", "b"], ["vault", "vault", "b"], ["vault"] * 3, ["c"] * 3,
                                       ["d"] * 3], ["vault"])[:3]
    assert once < twice < thrice and twice - once > thrice - twice


def test_windows_centre_on_the_best_passages_in_document_order_merged_and_never_on_nothing():
    spans = [(0, 100), (50, 150), (100, 200), (150, 250), (800, 900)]
    scores = [0.0, 1.0, 0.0, 0.5, 3.0]
    assert best_passages(scores, spans, 1, 100, 0, 1000) == [(800, 900)]
    assert best_passages(scores, spans, 2, 100, 0, 1000) == [(50, 150), (800, 900)]
    assert best_passages(scores, spans, 3, 100, 0, 1000) == [(50, 250), (800, 900)]  # the 2nd and 3rd touch
    assert best_passages(scores, spans, 9, 100, 0, 1000) == [(50, 250), (800, 900)]  # none scoring 0
    assert best_passages([1.0], [(0, 100)], 1, 400, 10, 300) == [(10, 300)]  # clipped to the input
    assert best_passages([0.0, 0.0], spans[:2], 2, 100, 0, 1000) == []


def test_a_window_already_holding_a_passages_centre_takes_no_second_window_for_it():
    spans = [(0, 100), (50, 150)]
    assert best_passages([2.0, 1.0], spans, 2, 400, 0, 1000) == [(0, 400)]


def test_the_signal_gives_each_token_its_best_passages_score():
    assert passage_signal([1.0, 3.0], [(0, 4), (2, 6)], 7).tolist() == [1, 1, 3, 3, 3, 3, 0]


@pytest.mark.parametrize("question", ["Which tower holds the vault?", "What is in the vault of the tower?"])
def test_bm25_reads_the_window_holding_the_words_without_the_bounded_read(session_and_path, question):
    session, path = session_and_path
    reading = session.read(path, SETTINGS, defer=True)
    result = reading.ask(question, BM25)
    assert result.route == "windows" and reading.pending is not None and not result.kv_cache.holds_document
    ((first, end),) = [(w.first, w.end) for w in result.windows]
    assert end - first == BM25.reread_tokens
    assert "The vault of the tower is QZX." in reading.tokenizer.decode(reading.input_ids[first:end].tolist())


def test_bm25_with_no_word_of_the_question_in_the_document_lets_the_bounded_cache_answer(session_and_path):
    session, path = session_and_path
    reading = session.read(path, SETTINGS, defer=True)
    result = reading.ask("Who wrote it?", BM25)
    assert result.route == "bounded-cache" and result.windows is None and reading.pending is None
    assert "Who wrote it?" not in TEXT and torch.is_tensor(reading.input_ids)
