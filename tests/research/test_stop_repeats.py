"""stop_repeats' replay ends token lists exactly where the engine's decode loop would."""

from __future__ import annotations

from research.smollm2.stop_repeats import stopped


def test_the_replay_drops_the_first_repeat_of_a_long_enough_run():
    sentence = [5, 6, 7, 8, 9, 10, 11, 12]
    assert stopped(sentence * 3 + [5, 6], 8) == sentence  # cut at the first whole repeat, the repeat dropped
    assert stopped(sentence * 2, 9) == sentence * 2  # runs shorter than the rule are kept
    assert stopped([1, 2, 1, 2, 3], 2) == [1, 2]
