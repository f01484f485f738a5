"""Answers that end: with stop_repeats, decoding stops when the answer repeats a run of tokens right after itself,
and the repeat is dropped. With word_repeats off, a word is never given twice in a row ("The pass pass pass")."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers.engines import chunks_of, random_ids

from locret_cli.core.answer.sampling import repeated_run
from locret_cli.core.engine import Engine
from locret_cli.core.policies import make_policy
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens, word_ids
from locret_cli.settings import AnswerSettings, ReadSettings


def test_repeated_run_finds_a_run_repeated_at_the_end():
    assert repeated_run([1, 2, 3, 4, 1, 2, 3, 4], 3) == 4
    assert repeated_run([9, 5, 1, 2, 3, 1, 2, 3], 3) == 3
    assert repeated_run([1, 2, 3, 1, 2, 3], 4) == 0  # shorter than asked
    assert repeated_run([1, 2, 3, 4, 5, 1, 2, 3, 4], 3) == 0  # not right after itself
    assert repeated_run([], 1) == 0


@pytest.mark.parametrize("stop_repeats, expected", [(3, [7, 8, 9, 10]), (0, [7] + [8, 9, 10] * 6)])
def test_decoding_stops_at_the_first_repeat_and_drops_it(llama, stop_repeats, expected):
    engine = Engine(llama, make_policy("full", llama), ReadSettings(budget=64, chunk_size=16),
                    PromptTokens(stop_ids=frozenset({1})),
                    answering=AnswerSettings(max_new_tokens=19, stop_repeats=stop_repeats))
    engine.read(chunks_of(random_ids(20), 16))
    script = itertools.cycle([8, 9, 10])
    engine.sampler.pick = lambda logits: next(script)
    assert engine.decode(7)[0] == expected


def test_negative_stop_repeats_is_refused():
    with pytest.raises(SettingError, match="^stop_repeats must be zero or more"):
        AnswerSettings(stop_repeats=-1).checked()


def scripted_engine(llama, words: frozenset[int], word_repeats: bool) -> Engine:
    """An engine whose every step's likeliest token is the one just given, and the next likeliest the one after it."""
    engine = Engine(llama, make_policy("full", llama), ReadSettings(budget=64, chunk_size=16),
                    PromptTokens(stop_ids=frozenset({1}), words=words),
                    answering=AnswerSettings(max_new_tokens=4, word_repeats=word_repeats))
    engine.read(chunks_of(random_ids(20), 16))

    def forward(ids, score):
        logits = torch.zeros(300)
        logits[ids[0]], logits[ids[0] + 1] = 2.0, 1.0
        return logits

    engine.forward = forward
    return engine


@pytest.mark.parametrize("word_repeats, words, expected", [
    (True, {7}, [7, 7, 7, 7]),
    (False, {7}, [7, 8, 8, 8]),  # 7 is a word: the next likeliest follows it; 8 is not, and may repeat
    (False, {7, 8}, [7, 8, 9, 9]),
    (False, set(), [7, 7, 7, 7]),
])
def test_a_word_never_follows_itself_with_word_repeats_off(llama, word_repeats, words, expected):
    assert scripted_engine(llama, frozenset(words), word_repeats).decode(7)[0] == expected


def test_word_ids_are_whole_words_of_letters_after_a_space():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "</s>": 1, "Ġpass": 2, "ĠThe": 3, "Ġ12": 4, "pass": 5, "ĠĠ": 6, "Ġé": 7, "▁key": 8,
             "Ġa-b": 9}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="</s>")))
    assert word_ids(tokenizer) == frozenset({2, 3, 8})
