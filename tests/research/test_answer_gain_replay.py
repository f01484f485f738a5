"""research/answer_gain_replay.py: an answer's log-probabilities by teacher forcing, and its report's three rules."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.pending_reads import LOCATED, SETTINGS, WORDS, session_and_document

from locret_cli.core.answer.reread import read_windows
from locret_cli.inputs.prompt import conversation_ids
from research.answer_gain_replay import answer_logprobs, gain, report


@pytest.fixture(scope="module")
def reading(tmp_path_factory):
    session, path = session_and_document(tmp_path_factory.mktemp("doc"))
    return session.read(path, SETTINGS, defer=True)


def test_teacher_forcing_scores_the_greedy_answer_as_its_best_token_at_every_step(reading):
    tokenizer, ids = reading.tokenizer, reading.input_ids
    pinned = reading.engine.pinned
    engine, _ = read_windows(reading.engine, tokenizer, ids, [(pinned + 100, pinned + 400)], WORDS)
    prompt = conversation_ids(tokenizer, [], LOCATED)
    before = engine.cache.length()
    answer = engine.fork().answer(prompt).token_ids
    scored = answer_logprobs(engine, prompt, answer)
    assert len(answer) == len(scored) == WORDS.max_new_tokens
    assert engine.cache.length() == before  # scored on a fork
    with torch.no_grad():  # the same forward, every token's log-probability: the answer's tokens are the best ones
        best = torch.log_softmax(engine.fork().logits(prompt + answer, False, len(answer) + 1)[:-1], -1).amax(-1)
    assert scored == pytest.approx(best.tolist(), abs=1e-3)
    assert answer_logprobs(engine, prompt, []) == []


def row(kind, verdict, gains, wrefused=False, answerable=0.9):
    refused = "right" if kind == "not-stated" else "none"
    return {"kind": kind, "verdict": verdict, "wrefused": wrefused, "answerable": answerable,
            "not_stated_verdict": refused, "with": [-1.0] * len(gains), "without": [-1.0 - g for g in gains]}


def test_the_gain_is_taken_token_by_token_and_an_empty_answer_gains_nothing():
    assert gain(row("lookup", "right", [0.5, 4.0]), "sum") == pytest.approx(4.5)
    assert gain(row("lookup", "right", [0.5, 4.0]), "max") == pytest.approx(4.0)
    assert gain(row("lookup", "right", [0.5, 4.0]), "mean") == pytest.approx(2.25)
    assert gain(row("lookup", "right", []), "max") == 0.0


def test_each_rule_refuses_as_it_says(tmp_path, capsys):
    rows = [row("lookup", "right", [5.0]),  # passes everything
            row("paraphrase", "right", [3.0], wrefused=True),  # shipped refuses it; a gain of 3 pardons it
            row("not-stated", "made_up", [0.2]),  # shipped lets it through; a low gain refuses it
            row("not-stated", "made_up", [0.1], answerable=0.5)]  # refused by the shipped check and by the gain
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(path, {"sum": (1.0,)})
    lines = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    assert lines["shipped (`--unfound-in read`, answerable < 0.725)"].split(" | ")[1:5] == ["2/4", "1", "0", "1/2"]
    assert lines["sum < 1"].split(" | ")[1:5] == ["4/4", "0", "0", "2/2"]
    assert lines["shipped unless sum >= 1"].split(" | ")[1:5] == ["3/4", "1", "0", "1/2"]
    assert lines["shipped, or sum < 1"].split(" | ")[1:5] == ["3/4", "0", "0", "2/2"]
