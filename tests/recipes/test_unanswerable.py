"""Questions a document does not answer (`recipes/embedded/unanswerable.py`) and the examples that teach the model to say
so."""

import random

from locret_cli.bench.synthetic import novel_fact, passkey_fact
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from locret_cli.models.embedded import NOT_STATED, not_stated_reply, says_not_stated
from recipes.embedded.qa_data import IGNORE, FillerPool, facts_for, qa_example
from recipes.embedded.unanswerable import PASSKEY_QUESTION, absent_fact, absent_question, near_miss, off_form_question
from recipes.embedded.validation import OFF_FORM_QUESTIONS, validation_set


def split_question(question: str) -> tuple[str, str]:
    attribute, entity = question[len("What is the "):-1].split(" of ", 1)
    return attribute, entity


def test_an_absent_question_is_never_one_the_facts_answer():
    rng = random.Random(1)
    for _ in range(200):
        facts = facts_for(rng, "train", rng.randint(1, 8), 0.5, 0.5)
        question = absent_question(rng, facts, "train", 0.5)
        assert question not in {f.question for f in facts}


def test_the_pass_key_is_asked_only_where_none_is_stated():
    rng = random.Random(2)
    with_key = [passkey_fact(rng), novel_fact(rng, "train")]
    without = [novel_fact(rng, "train")]
    asked_with = {absent_question(rng, with_key, "train") for _ in range(300)}
    asked_without = {absent_question(rng, without, "train") for _ in range(300)}
    assert PASSKEY_QUESTION not in asked_with and PASSKEY_QUESTION in asked_without


def test_a_near_miss_keeps_one_half_of_the_question_and_changes_the_other():
    rng = random.Random(3)
    fact = novel_fact(rng, "train")
    attribute, entity = split_question(fact.question)
    for _ in range(50):
        other_attribute, other_entity = split_question(near_miss(rng, fact, "train", 0.0, ()))
        assert (other_attribute == attribute) != (other_entity == entity) or (other_attribute, other_entity) == (
            attribute, entity)  # a draw can repeat the fact itself; absent_question then rejects it


def test_training_never_draws_the_dev_sets_off_form_questions():
    rng = random.Random(4)
    drawn = {off_form_question(rng) for _ in range(3000)}
    assert len(drawn) > 500 and not drawn & set(OFF_FORM_QUESTIONS)


def test_an_absent_question_is_answered_not_stated():
    tokenizer = TiktokenTokenizer.byte_level()
    pool = FillerPool.of_paragraphs(tokenizer, ["The ferryman counted the lamps.", "The mill stood by the river."] * 20,
                                    seed=0)
    rng = random.Random(5)
    facts = facts_for(rng, "train", 2, 0.0)
    example = qa_example(rng, tokenizer, pool, 200, facts, 12, absent=0.5,
                         absent_questions=lambda r, stated: absent_question(r, stated, "train"))
    absent = [f for f in example.asked if f.kind == "absent"]
    assert absent and len(absent) < 12
    answers = tokenizer.decode([t for t in example.labels if t != IGNORE])
    assert answers.count(" is not stated.") + answers.count(NOT_STATED) == len(absent)
    assert absent_fact("Who wrote it?").reply == NOT_STATED


def test_a_question_of_the_models_form_is_restated_as_not_stated():
    assert not_stated_reply("What is the gate code of the north depot?") == \
        "The gate code of the north depot is not stated."
    assert not_stated_reply(" What is the pass key? ") == "The pass key is not stated."
    assert not_stated_reply("Summarise chapter 3.") == NOT_STATED
    assert not_stated_reply("What is this text about?") == NOT_STATED
    for reply in ("The gate code of the north depot is not stated.", "The pass key is not stated.", NOT_STATED):
        assert says_not_stated(reply) and says_not_stated(f" {reply}\n")
    for answer in ("The gate code of the north depot is 4821.", "The document is long.", "is not stated.", ""):
        assert not says_not_stated(answer)


def test_validation_rows_for_absent_questions_end_in_not_stated():
    tokenizer = TiktokenTokenizer.byte_level()
    (ids, labels), = validation_set(tokenizer, 1, 300, absent=2)
    (plain_ids, _), = validation_set(tokenizer, 1, 300)
    assert len(ids) == len(plain_ids) + 2
    for row, row_labels in zip(ids[-2:], labels[-2:]):
        answer = [t for t in row_labels.tolist() if t != IGNORE]
        question = tokenizer.decode(row.tolist()).rsplit("Question: ", 1)[1].split("\n", 1)[0]
        assert tokenizer.decode(answer[:-1]) == " " + not_stated_reply(question)
        assert answer[-1] == tokenizer.eos_token_id and " is not stated." in tokenizer.decode(answer)
