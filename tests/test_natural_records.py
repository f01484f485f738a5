"""The natural-question training records (`recipes/natural_records.py`): grounded answers, reworded questions."""

from __future__ import annotations

import re

import pytest

from locret_cli.checks.grounding import COMMON
from recipes import natural_records as nr

FILLER = ("This block describes a model component in plain words, with no settings of its own. " * 6).strip()


def config_block(owner: str, settings: dict[str, str], description: str = "What this setting controls.") -> str:
    lines = [owner, "", "Args:"]
    for name, value in settings.items():
        lines += [f"    {name} (`int`, *optional*, defaults to {value}):", f"        {description}",
                  "        It is read once when the object is built."]
    return "\n".join(lines)


def content_words(text: str) -> set[str]:
    """The words of `text` that carry meaning: letters only, lower case, not in grounding's common-word list."""
    return {w for w in re.findall(r"[a-z]+", text.casefold()) if w not in COMMON}


def blocks() -> list[str]:
    made = []
    for i in range(40):
        made.append(f"pkg.filler_{i}\n\n{FILLER}")
        made.append(config_block(f"pkg.models.m{i}.Model{i}Config",
                                 {f"hidden_width_{i}": str(64 * (i + 1)), f"use_cache_{i}": "`True`",
                                  f"pad_side_{i}": "`\"left\"`"}))
    return made


def test_settings_are_read_with_their_lines_and_odd_values_are_skipped():
    block = config_block("pkg.BertConfig", {"hidden_size": "768", "vocab": "`self.vocab`", "long": "x" * 41})
    found = nr.settings_in([block])
    assert [(s.owner, s.name, s.value) for s in found] == [("pkg.BertConfig", "hidden_size", "768")]
    assert found[0].lines == ("    hidden_size (`int`, *optional*, defaults to 768):\n"
                              "        What this setting controls.\n        It is read once when the object is built.")
    assert found[0].short_owner == "BertConfig" and found[0].is_class


def test_a_method_is_named_with_what_holds_it():
    setting = nr.Setting("pkg.tokenization.Tokenizer.__init__", "lower", "True", "", 0)
    assert setting.short_owner == "Tokenizer.__init__" and not setting.is_class


def test_every_answer_is_grounded_in_its_kept_lines_and_the_lines_in_the_prompt():
    made = nr.records(blocks(), 60, 700, seed=3)
    assert len(made) == 60 and {r["kind"] for r in made} == {"default", "switch", "two-place"}
    for r in made:
        assert all(r["prompt"].count(lines) == 1 for lines in r["keep"])
        values = re.findall(r"defaults to (.+?)\.(?: |$)", r["answer"])
        assert len(values) == len(r["keep"])
        assert all(value in lines for value, lines in zip(values, r["keep"], strict=True))


def test_questions_share_no_content_word_with_the_kept_lines_but_the_names():
    for r in nr.records(blocks(), 60, 700, seed=4):
        question = r["prompt"].rsplit("Question:", 1)[1]
        names = set()
        for match in re.finditer(r"(\w+) in (\w+(?:\.\w+)?)", r["answer"]):
            names |= content_words(match[1]) | content_words(match[2])
        kept = set().union(*(content_words(lines) for lines in r["keep"]))
        assert content_words(question) & kept <= names, question


def test_a_switch_question_is_answered_yes_or_no_by_the_default():
    for r in nr.records(blocks(), 80, 700, seed=5):
        if r["kind"] != "switch":
            continue
        question = r["prompt"].rsplit("Question:", 1)[1]
        state = re.search(r"(?:switched|\w+_\d+) (on|off)\b", question)[1]
        assert r["answer"].startswith("Yes" if state == "on" else "No"), (question, r["answer"])


def test_the_same_seed_gives_the_same_records():
    assert nr.records(blocks(), 10, 700, seed=1) == nr.records(blocks(), 10, 700, seed=1)
    assert nr.records(blocks(), 10, 700, seed=1) != nr.records(blocks(), 10, 700, seed=2)


def test_a_document_fills_about_the_asked_length_in_whole_blocks():
    every = blocks()
    for r in nr.records(every, 20, 700, seed=6):
        document = r["prompt"].rsplit("\n\nQuestion:", 1)[0]
        assert document.split("\n\n")[0] + "\n\n" in "\n\n".join(every)
        assert 700 * nr.CHARS_PER_TOKEN * 0.5 < len(document) <= 700 * nr.CHARS_PER_TOKEN + max(map(len, every))


def test_only_a_training_package_is_read():
    with pytest.raises(SystemExit, match="not a training package"):
        nr.package_blocks("rich")


def test_a_mix_shuffles_in_fact_records_that_keep_their_statements():
    natural = nr.records(blocks(), 15, 700, seed=3)
    paragraphs = [f"Paragraph {i} tells how a part of the system is put together and why it works. " * 3
                  for i in range(30)]
    made = nr.mixed(natural, paragraphs, 5, 700, seed=3)
    facts = [r for r in made if r["kind"] == "fact"]
    assert len(made) == 20 and len(facts) == 5
    assert [r for r in made if r["kind"] != "fact"] != natural  # shuffled in, not appended
    assert sorted(map(str, (r for r in made if r["kind"] != "fact"))) == sorted(map(str, natural))
    for r in facts:
        assert r["keep"] and all(r["prompt"].count(statement) == 1 for statement in r["keep"])
    assert nr.mixed(natural, paragraphs, 5, 700, seed=3) == made
