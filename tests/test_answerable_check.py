"""`answerable_below`: the model, asked over the windows it read whether they answer the question, says yes or no
(`core/answer/answerable.py`); an answer whose share of yes is under the setting is replaced by the refusal."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from helpers.pending_reads import LOCATED, SETTINGS, WORDS, session_and_document

from locret_cli.checks.grounding import REFUSAL
from locret_cli.cli.report import grounding_warning
from locret_cli.core.answer import reread
from locret_cli.core.answer.answerable import ANSWERABLE, NO, YES, yes_share
from locret_cli.errors import SettingError


class SpelledTokenizer:
    """Each of `single` is one token (its index + 1); any other text is two tokens."""

    def __init__(self, single):
        self.single = list(single)

    def encode(self, text, add_special_tokens=False):
        return [self.single.index(text) + 1] if text in self.single else [90, 91]


def test_the_share_of_yes_weighs_every_one_token_spelling_of_yes_against_those_of_no():
    tokenizer = SpelledTokenizer(YES + NO)
    logits = torch.zeros(100)
    logits[1:5], logits[5:9] = 1.5, -0.5  # the four spellings of yes, then of no
    assert yes_share(tokenizer, logits) == pytest.approx(1 / (1 + math.exp(-2.0)))
    logits[1] = 30.0  # one spelling of yes far ahead
    assert yes_share(tokenizer, logits) > 0.999
    only_yes = SpelledTokenizer(YES)
    assert yes_share(only_yes, logits) == 0.5  # "no" is not one token: no choice to read


@pytest.fixture(scope="module")
def reading(tmp_path_factory):
    session, path = session_and_document(tmp_path_factory.mktemp("doc"))
    return session.read(path, SETTINGS, defer=True)


@pytest.mark.parametrize("share, below, refused", [(0.3, 0.5, True), (0.7, 0.5, False), (0.5, 0.5, False)])
def test_an_answer_the_model_says_its_windows_do_not_answer_is_refused(reading, monkeypatch, share, below, refused):
    asked = []

    def check(engine, tokenizer, check_ids):
        asked.append((tokenizer.decode(check_ids), engine.cache.length()))
        return share

    monkeypatch.setattr(reread, "answerable_share", check)
    plain = reading.ask(LOCATED, WORDS)
    result = reading.ask(LOCATED, replace(WORDS, answerable_below=below))
    (text, cached), = asked
    assert LOCATED in text and ANSWERABLE in text and cached > 0  # asked over the windows read, before the answer
    assert result.route == "windows" and result.grounding.answerable == share
    assert result.to_json()["grounding"]["answerable"] == share
    assert result.answer == (REFUSAL if refused else plain.answer)
    assert result.grounding.withheld == (plain.answer if refused else None)
    warning = grounding_warning(result)
    said = warning is not None and "said the text it read does not answer the question" in warning.plain
    assert said == refused


def test_the_check_is_asked_only_when_the_setting_is_on_and_windows_answer(reading, monkeypatch):
    monkeypatch.setattr(reread, "answerable_share", lambda *_: pytest.fail("asked with the setting off"))
    off = reading.ask(LOCATED, WORDS)
    assert off.grounding.answerable is None and off.to_json()["grounding"]["answerable"] is None
    cache = reading.ask(LOCATED, replace(WORDS, reread=0, answerable_below=0.9))
    assert cache.route == "bounded-cache" and cache.grounding.answerable is None and cache.answer != REFUSAL


def test_asking_leaves_the_windows_answer_as_it_was(reading):
    # The byte tokenizer spells neither "yes" nor "no" as one token: the share is 0.5, from a real fork and forward.
    plain = reading.ask(LOCATED, WORDS)
    kept = reading.ask(LOCATED, replace(WORDS, answerable_below=0.4))
    withheld = reading.ask(LOCATED, replace(WORDS, answerable_below=0.6))
    assert kept.grounding.answerable == withheld.grounding.answerable == 0.5
    assert kept.answer == plain.answer and withheld.answer == REFUSAL and withheld.grounding.withheld == plain.answer


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_the_setting_is_a_share_between_zero_and_one(value):
    from locret_cli.settings import AnswerSettings

    with pytest.raises(SettingError, match="answerable_below"):
        AnswerSettings(answerable_below=value).checked()
