"""kept_values finds an answer's value among a read's kept entries, and reads a saved read's kept map; the reader
trainer skips the questions whose value a read keeps too little of."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers.byte_tokenizers import byte_tokenizer
from helpers.models import tiny_model
from safetensors.torch import save_file

from locret_cli.api import Session
from locret_cli.errors import LocretError
from locret_cli.models.loading import LoadedModel
from locret_cli.training.kept_values import kept_map, kept_share
from locret_cli.training.reader_trainer import ReaderConfig, ReaderRecord, ReaderTrainer, load_reader_records

TEXT = "".join(f"Line {i}: the crate in bay {i % 7} holds {i * 13 % 97} lamps.\n" for i in range(60))


def test_a_value_counts_where_every_token_of_one_occurrence_is_kept():
    ids = torch.tensor([7, 1, 2, 9, 1, 2, 5])
    kept = torch.zeros(4, 7, dtype=torch.bool)
    kept[0, [1, 2]] = True  # the first occurrence whole
    kept[1, [4, 5]] = True  # the second whole
    kept[2, [1, 5]] = True  # half of each: not kept
    assert kept_share(ids, kept, [1, 2]) == 0.25  # the best single occurrence: one row of four
    kept[3, [4, 5]] = True
    assert kept_share(ids, kept, [1, 2]) == 0.5
    assert kept_share(ids, kept, [3]) == 0.0  # never in the document
    assert kept_share(ids, kept, []) == 0.0


def test_a_saved_reads_origins_become_one_row_per_layer_and_kv_head(tmp_path):
    path = tmp_path / "read.locret"
    save_file({"document.ids": torch.tensor([4, 5, 6, 7]),
               "layers.0.origins": torch.tensor([[[0, 2], [1, -1]]]),  # (1, kv_heads 2, kept 2); -1: not a token
               "layers.1.origins": torch.tensor([[[3, 3], [2, 0]]])}, str(path))
    ids, kept = kept_map(path)
    assert ids.tolist() == [4, 5, 6, 7]
    assert kept.tolist() == [[True, False, True, False], [False, True, False, False],
                             [False, False, False, True], [True, False, True, False]]


def trainer_for(tmp_path, records, min_kept_share: float) -> ReaderTrainer:
    loaded = LoadedModel(tiny_model("llama"), byte_tokenizer(), "tiny llama", {})
    config = ReaderConfig(steps=2, rank=4, uncut_share=1.0, min_kept_share=min_kept_share)  # every read whole
    return ReaderTrainer(Session(replace(loaded, defaults={**loaded.defaults, "policy": "streaming"}), None, None), records, tmp_path / "reader", config)


def records() -> list[ReaderRecord]:
    return [ReaderRecord(TEXT, [("Which bay?", "Bay 3."), ("Which animal?", "A zebra."), ("What is it?", "A crate.")],
                         values=["bay 3", "zebra", None]),
            ReaderRecord(TEXT, [("Which animal?", "A zebra.")], values=["zebra"])]


def test_the_trainer_skips_questions_whose_value_its_read_does_not_keep(tmp_path):
    t = trainer_for(tmp_path, records(), min_kept_share=0.3)
    t.prepare_reads()
    assert t.skip_unkept() == 2  # "zebra" is nowhere in the document; a question with no value always stays
    assert t.records[0].questions == [("Which bay?", "Bay 3."), ("What is it?", "A crate.")]
    assert t.records[0].values == ["bay 3", None] and t.records[1].questions == []
    assert sorted((index, question) for index, question, _ in t.pairs()) == [(0, "What is it?"), (0, "Which bay?")]
    assert t.train().skipped == 2


def test_without_a_kept_share_nothing_is_skipped_and_skipping_everything_is_an_error(tmp_path):
    t = trainer_for(tmp_path / "off", records(), min_kept_share=0.0)
    t.prepare_reads()
    assert t.skip_unkept() == 0 and len(t.pairs()) == 4
    nothing = [ReaderRecord(TEXT, [("Which animal?", "A zebra.")], values=["zebra"])]
    t = trainer_for(tmp_path / "all", nothing, min_kept_share=0.3)
    t.prepare_reads()
    with pytest.raises(LocretError, match="no question's value is kept in 0.3 of its read's heads"):
        t.skip_unkept()


def test_a_question_may_name_its_value_and_an_empty_one_is_refused(tmp_path):
    data = tmp_path / "data.jsonl"
    line = {"document": TEXT, "questions": [{"question": "Which bay?", "answer": "Bay 3.", "value": "bay 3"},
                                            {"question": "What is it?", "answer": "A crate."}]}
    data.write_text(json.dumps(line) + "\n")
    assert load_reader_records(data)[0].values == ["bay 3", None]
    line["questions"][0]["value"] = " "
    data.write_text(json.dumps(line) + "\n")
    with pytest.raises(LocretError, match="data.jsonl:1: a question's 'value' is empty"):
        load_reader_records(data)
