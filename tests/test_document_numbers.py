"""numbers_from_document: an answer's digits keep its number the start of one the document holds."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
from helpers.engines import chunks_of, random_ids
from helpers.pending_reads import SETTINGS, UNLOCATED, WORDS
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from locret_cli.api.reading import NUMBERS_NEED_TOKENS
from locret_cli.core.engine import Engine
from locret_cli.core.policies import make_policy
from locret_cli.inputs.document_numbers import DocumentNumbers, NumberTokens
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings

VOCAB = {"<s>": 0, "</s>": 1, "Ġis": 2, ".": 3, ",": 4, "Ġ7": 5, "0": 6, "2": 7, "1": 8, "7": 9, "Ġ4": 10, "821": 11,
         "Ġ3": 12, "14": 13, "Ġpass": 14, "A7": 15, "▁5": 16}


def tokens() -> NumberTokens:
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(VOCAB, unk_token="</s>")))
    return NumberTokens.of(tokenizer)


def test_number_tokens_are_digits_alone_with_or_without_a_space():
    found = tokens()
    assert found.digits == {5: "7", 6: "0", 7: "2", 8: "1", 9: "7", 10: "4", 11: "821", 12: "3", 13: "14", 16: "5"}
    assert found.spaced == {5, 10, 12, 16} and found.separators == {4}


def test_document_numbers_hold_every_start_of_every_run_of_digits():
    numbers = DocumentNumbers.of(["the", "70217", "4821", "3.14", "a-17"], tokens())
    assert numbers.starts == {"7", "70", "702", "7021", "70217", "4", "48", "482", "4821", "3", "1", "14", "17"}


@pytest.mark.parametrize("answer, candidate, allowed", [
    ([2, 5, 6, 7, 8], 9, True),  # " 7021" + "7": 70217
    ([2, 5, 6, 7, 8, 9], 9, False),  # "702177" starts no number of the document
    ([2, 5, 6, 7, 8, 9], 3, True),  # anything but a digit
    ([2, 5, 6, 7, 8, 9], 10, True),  # " 4" starts a number of its own
    ([2, 10, 4], 11, True),  # "4,821" is 4821
    ([2, 12, 3], 13, True),  # "3.14": 14 after a point is a number of its own
    ([2, 5, 6], 13, False),  # "7014"
    ([], 16, False), ([], 12, True),  # a first token too; "▁5" is spaced: 5 is no number of the document
    ([14], 15, True),  # letters and digits together are a code, not a number
])
def test_a_digit_is_allowed_only_where_its_number_starts_one_of_the_document(answer, candidate, allowed):
    numbers = DocumentNumbers.of(["70217", "4821", "3.14"], tokens())
    assert numbers.allows(answer, candidate) is allowed


def scripted_engine(llama, numbers_from_document: bool, script: list[list[int]]) -> Engine:
    """An engine whose step i ranks the tokens `script[i]` first to last, and every other token below them."""
    engine = Engine(llama, make_policy("full", llama), ReadSettings(budget=64, chunk_size=16),
                    PromptTokens(stop_ids=frozenset({1})),
                    answering=AnswerSettings(max_new_tokens=len(script) + 1,
                                             numbers_from_document=numbers_from_document))
    engine.read(chunks_of(random_ids(20), 16))
    steps = iter(script)

    def forward(ids, score):
        logits = torch.zeros(300)
        for rank, token in enumerate(next(steps)):
            logits[token] = 10.0 - rank
        return logits

    engine.forward = forward
    return engine


@pytest.mark.parametrize("numbers_from_document, expected", [(True, [5, 6, 7, 8, 9, 3]), (False, [5, 6, 7, 8, 9, 9])])
def test_decoding_passes_over_a_digit_the_document_does_not_hold(llama, numbers_from_document, expected):
    script = [[6], [7], [8], [9], [9, 3], [1]]
    numbers = DocumentNumbers.of(["70217"], tokens())
    assert scripted_engine(llama, numbers_from_document, script).decode(5, numbers=numbers)[0] == expected


def test_a_reading_gives_only_its_documents_numbers_once_asked_to(session_and_path, tmp_path):
    session, _ = session_and_path
    path = tmp_path / "code.txt"
    path.write_text("The lamp of the north room is green. " * 20 + "The gate code is 70217. " + "Rain fell. " * 20)
    reading = session.read(str(path), SETTINGS)
    off = replace(WORDS, reread=0, max_new_tokens=48)
    free = reading.ask(UNLOCATED, off)
    assert reading._numbers is None  # built only when asked for
    held = reading.ask(UNLOCATED, replace(off, numbers_from_document=True))
    assert reading._numbers.starts == {"7", "70", "702", "7021", "70217"}
    assert set(re.findall(r"\d+", free.answer)) - reading._numbers.starts  # the model's own numbers: not held
    assert all(run in reading._numbers.starts for run in re.findall(r"\d+", held.answer))
    assert held.answer != free.answer
    assert NUMBERS_NEED_TOKENS not in held.warnings


def test_a_reading_without_its_tokens_warns_that_any_number_may_be_given(session_and_path, tmp_path):
    session, _ = session_and_path
    path = tmp_path / "code.txt"
    path.write_text("The lamp of the north room is green. " * 20 + "The gate code is 70217. " + "Rain fell. " * 20)
    reading = session.read(str(path), SETTINGS)
    reading.input_ids = None  # as a context saved without the document's tokens
    off = replace(WORDS, reread=0, max_new_tokens=48)
    free = reading.ask(UNLOCATED, off)
    held = reading.ask(UNLOCATED, replace(off, numbers_from_document=True))
    assert reading._numbers is None and held.answer == free.answer
    assert NUMBERS_NEED_TOKENS in held.warnings and NUMBERS_NEED_TOKENS not in free.warnings
    assert reading.answer_warnings(UNLOCATED, replace(off, numbers_from_document=True)) == [NUMBERS_NEED_TOKENS]


def test_the_embedded_tokenizer_has_word_and_digit_tokens():
    """Both answer settings read the vocabulary; the embedded model's tiktoken tokenizer gives it as transformers'
    tokenizers do."""
    from locret_cli.inputs.prompt import word_ids
    from locret_cli.inputs.tokenizer import TiktokenTokenizer
    from locret_cli.models.embedded import EMBEDDED_DIR

    tokenizer = TiktokenTokenizer.from_file(EMBEDDED_DIR / "tokenizer.tiktoken")
    the, seven = tokenizer.encode(" the"), tokenizer.encode(" 7")
    assert len(the) == 1 and the[0] in word_ids(tokenizer)
    numbers = NumberTokens.of(tokenizer)
    assert len(seven) == 1 and numbers.digits[seven[0]] == "7" and seven[0] in numbers.spaced
