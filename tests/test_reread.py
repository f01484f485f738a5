"""Locate, then re-read: the windows an answer's attention names, and a second pass that reads exactly them."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.byte_tokenizers import byte_tokenizer
from helpers.models import tiny_model

from locret_cli.api import Session
from locret_cli.api.saved_context import save_reading
from locret_cli.core.answer.locate import attention_per_token, best_windows, question_words_per_token
from locret_cli.core.answer.reread import SEPARATOR, locate, merged, second_hop
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import conversation_ids
from locret_cli.inputs.tokenizer import encode_text
from locret_cli.models.loading import LoadedModel
from locret_cli.settings import AnswerSettings, ReadSettings

TEXT = "".join(f"Line {i}: the lamp of room {i} is {i * 7 % 100}.\n" for i in range(120))


def test_windows_centre_on_the_densest_runs_in_document_order():
    per_token = torch.zeros(1000, dtype=torch.float64)
    per_token[700:710] = 5.0
    per_token[200:210] = 3.0
    assert best_windows(per_token, 2, 100) == [(154, 254), (654, 754)]
    assert best_windows(per_token, 1, 100) == [(654, 754)]  # the densest first


def test_windows_merge_when_they_overlap_and_skip_what_received_nothing():
    per_token = torch.zeros(1000, dtype=torch.float64)
    per_token[500:510] = 5.0
    per_token[580:590] = 4.0
    assert best_windows(per_token, 3, 100) == [(454, 634)]  # two windows overlapping, merged; no third
    assert best_windows(torch.zeros(100, dtype=torch.float64), 2, 10) == []


def test_windows_never_start_in_the_prompt_head_nor_run_past_the_end():
    per_token = torch.zeros(300, dtype=torch.float64)
    per_token[12] = per_token[295] = 1.0
    assert best_windows(per_token, 2, 64, start=10) == [(10, 74), (236, 300)]


def test_attention_per_token_sums_over_heads_and_skips_the_prompt_head():
    origins = torch.tensor([3, 5, 5, 1])
    weights = torch.tensor([0.5, 0.25, 0.25, 9.0])
    assert attention_per_token(origins, weights, 6, skip=2).tolist() == [0, 0, 0, 0.5, 0, 0.5]


@pytest.fixture()
def reading(tmp_path):
    session = Session(LoadedModel(tiny_model("llama"), byte_tokenizer(), "tiny llama", {"policy": "streaming"}), None)
    (tmp_path / "doc.txt").write_text(TEXT)
    settings = ReadSettings(policy="streaming", budget=96, chunk_size=64, stabilizers=16)
    return session, session.read(str(tmp_path / "doc.txt"), settings)


def test_the_second_pass_reads_exactly_the_windows_the_first_pass_named(reading):
    session, reading = reading
    answering = AnswerSettings(max_new_tokens=4, reread=2, reread_tokens=48)
    question_ids = conversation_ids(reading.tokenizer, [], "What is the lamp of room 7?")
    spans, _, _ = locate(reading.engine, reading.tokenizer, reading.input_ids, reading.engine.pinned,
                         "What is the lamp of room 7?", question_ids, answering)
    result = reading.ask("What is the lamp of room 7?", answering)
    assert [(w.first, w.end) for w in result.windows] == spans and spans
    separator = len(encode_text(reading.tokenizer, SEPARATOR))
    read_again = reading.engine.pinned + sum(end - first for first, end in spans) + separator * (len(spans) + 1)
    assert result.kv_cache.peak_tokens >= read_again
    assert all(w.label.startswith("lines ") for w in result.windows)
    plain = reading.ask("What is the lamp of room 7?", replace(answering, reread=0))
    assert plain.windows is None


def test_a_saved_context_keeps_the_tokens_to_re_read(reading, tmp_path):
    session, reading = reading
    save_reading(reading, tmp_path / "doc.locret")
    loaded = session.open(str(tmp_path / "doc.locret"))
    assert torch.equal(loaded.input_ids, reading.input_ids)
    loaded.input_ids = None  # as a file written before the tokens were kept
    with pytest.raises(SettingError, match="^reread needs the document's tokens"):
        loaded.ask("What is the lamp of room 7?", AnswerSettings(reread=1))


def test_the_question_words_name_where_they_occur_and_common_tokens_weigh_nothing():
    input_ids = torch.tensor([0] * 5000 + [7, 8] + [0] * 2998)
    per_token = question_words_per_token(input_ids, [7, 8, 0, 99], skip=3)
    assert per_token.nonzero().flatten().tolist() == [5000, 5001]  # 0 is too common, 99 absent
    assert per_token[5000] == pytest.approx(torch.log(torch.tensor(8.0)).item())  # 8,000 / (1,000 * 1)


def test_with_nothing_to_locate_the_bounded_cache_answers(reading):
    """Byte tokens are all common in a document: the question's words name no window, so no second pass runs."""
    session, reading = reading
    settings = AnswerSettings(max_new_tokens=2, reread=1, reread_tokens=32, locate="words")
    result = reading.ask("Which is the lamp of room 93?", settings)
    assert result.windows is None
    assert result.answer == reading.ask("Which is the lamp of room 93?", replace(settings, reread=0)).answer


def test_a_second_hop_locates_where_the_first_answers_words_occur_outside_the_first_windows():
    tokenizer = byte_tokenizer()
    filler = "filler text. " * 1000  # bytes as tokens: only the sentences' letters and digits are rare
    text = filler + "The choir meets in room 12. " + filler + "The key of room 12 is held by Ilse. " + filler
    input_ids = torch.tensor(encode_text(tokenizer, text))
    at = text.index("The choir")
    first = [(at - 20, at + 40)]
    answer = encode_text(tokenizer, "The choir meets in room 12.")
    answering = AnswerSettings(reread=1, reread_tokens=60, hops=2)
    (found,) = second_hop(tokenizer, input_ids, 0, first, answer, answering)
    key = text.index("The key of room 12")
    assert found[0] <= key < found[1] and found[0] >= first[0][1]


def test_windows_of_both_hops_are_joined_in_document_order():
    assert merged([(100, 200)], [(150, 260), (400, 500)]) == ([(100, 260), (400, 500)], [1, 2])
    assert merged([(300, 400)], [(0, 50)]) == ([(0, 50), (300, 400)], [2, 1])


def test_two_hops_answer_from_the_windows_of_both(reading):
    session, reading = reading
    answering = AnswerSettings(max_new_tokens=6, reread=1, reread_tokens=48, hops=2)
    result = reading.ask("What is the lamp of room 7?", answering, sources=0)
    assert result.windows and result.windows[0].hop == 1
    assert {w.hop for w in result.windows} <= {1, 2} and result.to_json()["windows"][0]["hop"] == 1
    separator = len(encode_text(reading.tokenizer, SEPARATOR))
    read_again = reading.engine.pinned + sum(w.end - w.first for w in result.windows) + \
        separator * (len(result.windows) + 1)
    assert result.kv_cache.peak_tokens >= read_again
