"""research/locate_pairs.py: the mixed rule's windows, BM25's best but one, then the embedding's best."""

from __future__ import annotations

from research.locate_pairs import mixed_passages

SPANS = [(0, 100), (50, 150), (100, 200), (150, 250), (800, 900)]


def test_the_last_window_goes_to_the_most_similar_passage_the_bm25_windows_do_not_hold():
    bm25 = [0.0, 1.0, 0.0, 0.5, 3.0]
    similar = [0.9, 0.8, 0.1, 0.2, 0.95]  # the best three centres lie in BM25's windows (800, 900) and (50, 150)
    assert mixed_passages(bm25, similar, SPANS, 3, 100, 0, 1000) == [(50, 250), (800, 900)]  # (150, 250) joined
    assert mixed_passages(bm25, similar, SPANS, 2, 100, 0, 1000) == [(0, 100), (800, 900)]


def test_similarity_fills_what_bm25_cannot_and_may_be_negative():
    none = [0.0] * 5
    similar = [-0.3, -0.1, -0.2, -0.9, -0.5]
    assert mixed_passages(none, similar, SPANS, 2, 100, 0, 1000) == [(50, 200)]  # (50, 150) and (100, 200), joined
    assert mixed_passages(none, similar, SPANS, 1, 100, 0, 1000) == [(50, 150)]
