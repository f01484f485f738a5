"""The `kinds` bench task: one question of each kind per document, every sentence it needs in the text, depths that
turn from one document to the next; and bench rows that change the model's reader."""

from __future__ import annotations

import pytest

from locret_cli.bench.kinds import COMMON_EVERY, COMMON_WORDS, KINDS, kind_depths
from locret_cli.bench.suite import BenchConfig, cell_spec, row_variant
from locret_cli.bench.tasks import Question, generated_samples
from locret_cli.errors import SettingError
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from locret_cli.models.spec import ModelSpec


def test_each_document_asks_every_kind_and_holds_what_each_answer_needs(fake_package):
    tokenizer = TiktokenTokenizer.byte_level()
    samples = generated_samples("kinds", tokenizer, 9000, 3)
    for sample in samples:
        text = "".join(segment.text for segment in sample.document.segments())
        assert [q.kind for q in sample.questions] == list(KINDS)
        assert abs(len(tokenizer.encode(text)) - 9000) < 150
        for question in sample.questions:
            assert all(value in text for value in (question.answer, *question.parts))
        fact, paraphrase, distractor, passkey, two_hop, multi = sample.questions
        place = fact.question.removeprefix("What is the ").removesuffix("?")
        assert f"The {place} is {fact.answer}." in text
        asked = paraphrase.question.removeprefix("What is the ").removesuffix("?")
        assert f"The {asked} is" not in text  # stated only in other words
        attribute, entity = distractor.question.removeprefix("What is the ").removesuffix("?").split(" of the ")
        assert text.count(f"The {attribute} of the ") >= 4 and f"The {attribute} of the {entity} is " in text
        assert f"The pass key is {passkey.answer}. Remember it." in text
        assert sum(text.count(common) for common in COMMON_WORDS) == len(text) // COMMON_EVERY
        room = text.split(f"is held by {two_hop.answer}")[0].rsplit("The key of room ", 1)[1].strip()
        group = two_hop.question.removeprefix("Who holds the key of the room where the ").removesuffix(" meets?")
        assert f"The {group} meets in room {room}." in text
        assert len(multi.parts) == 2
    again = generated_samples("kinds", tokenizer, 9000, 3)
    assert [s.questions for s in again] == [s.questions for s in samples]


def test_depths_turn_over_the_document_from_one_document_to_the_next():
    firsts = [kind_depths(i, 4)["fact"] for i in range(4)]
    assert firsts == sorted(firsts) and all(0.05 <= d <= 0.95 for i in range(4) for d in kind_depths(i, 4).values())
    assert len({round(d, 6) for d in kind_depths(0, 4).values()}) == len(KINDS)


def test_several_values_are_right_only_together():
    asked = Question("What are the codes?", "1111", kind="multi", parts=("2222", "3333"))
    assert asked.contained_in("They are 1111, 2222 and 3333.") and asked.is_exact("1111, 2222, 3333")
    assert not asked.contained_in("They are 1111 and 2222.")


def test_a_row_may_change_the_reader_the_model_loads():
    assert row_variant("locret:reread=0:reader=off") == ("locret", {"reread": 0, "reader": "off"})
    spec = cell_spec(BenchConfig(ModelSpec("smollm2", reader="runs/r")), "kinds", 4096, "locret:reread=0:reader=off")
    assert spec["model"]["reader"] == "off" and "reader" not in spec["settings"] and spec["settings"]["reread"] == 0
    assert cell_spec(BenchConfig(ModelSpec("smollm2", reader="runs/r")), "kinds", 4096, "locret")["model"]["reader"] == \
        "runs/r"
    with pytest.raises(SettingError, match="unknown setting"):
        row_variant("locret:readr=off")
