"""Answers that end: with stop_repeats, decoding stops when the answer repeats a run of tokens right after itself,
and the repeat is dropped."""

from __future__ import annotations

import itertools

import pytest
from test_engine import chunks_of, random_ids

from locret_cli.core.engine import Engine, repeated_run
from locret_cli.core.policies import make_policy
from locret_cli.core.settings import AnswerSettings, ReadSettings
from locret_cli.errors import SettingError


def test_repeated_run_finds_a_run_repeated_at_the_end():
    assert repeated_run([1, 2, 3, 4, 1, 2, 3, 4], 3) == 4
    assert repeated_run([9, 5, 1, 2, 3, 1, 2, 3], 3) == 3
    assert repeated_run([1, 2, 3, 1, 2, 3], 4) == 0  # shorter than asked
    assert repeated_run([1, 2, 3, 4, 5, 1, 2, 3, 4], 3) == 0  # not right after itself
    assert repeated_run([], 1) == 0


@pytest.mark.parametrize("stop_repeats, expected", [(3, [7, 8, 9, 10]), (0, [7] + [8, 9, 10] * 6)])
def test_decoding_stops_at_the_first_repeat_and_drops_it(llama, stop_repeats, expected):
    engine = Engine(llama, make_policy("full", llama), ReadSettings(budget=64, chunk_size=16), stop_ids={1},
                    answering=AnswerSettings(max_new_tokens=19, stop_repeats=stop_repeats))
    engine.read(chunks_of(random_ids(20), 16))
    script = itertools.cycle([8, 9, 10])
    engine.pick = lambda logits: next(script)
    assert engine.decode(7)[0] == expected


def test_negative_stop_repeats_is_refused():
    with pytest.raises(SettingError, match="^stop_repeats must be zero or more"):
        AnswerSettings(stop_repeats=-1).checked()
