"""The curriculum's stage metric counts whole answers to first-time questions: one wrong token makes its answer
wrong, and repeated questions do not count."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from locret_cli.bench.synthetic import Fact
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from recipes.embedded.pretrain import answer_loss, first_asks, validation_accuracy
from recipes.embedded.qa_data import IGNORE, Example
from recipes.embedded.validation import validation_set


def test_an_answer_counts_only_when_every_token_is_right():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():
        predicted = model(input_ids=ids).logits.argmax(-1)  # (1, 12): the token predicted after each position
    labels = torch.full_like(ids, IGNORE)
    labels[0, 3:6] = predicted[0, 2:5]  # answer 1: three tokens, all predicted
    labels[0, 8:11] = predicted[0, 7:10]  # answer 2: three tokens, the last one wrong
    labels[0, 10] = (predicted[0, 9] + 1) % 50
    with torch.no_grad():
        _, right = answer_loss(model, ids, labels)
    assert right.tolist() == [True, False]

    labels[0, 10] = predicted[0, 9]
    with torch.no_grad():
        _, right = answer_loss(model, ids, labels)
    assert right.tolist() == [True, True]


def test_only_the_first_ask_of_a_fact_counts():
    a, b = (Fact(f"The code of {x} is 1.", f"What is the code of {x}?", "1", "attribute") for x in "AB")
    examples = [Example([], [], [a, b], [a, a, b, a]), Example([], [], [a, b], [b, a])]
    assert first_asks(examples).tolist() == [True, False, True, False, True, True]


def test_validation_rows_ask_one_question_each_after_the_same_document():
    tokenizer = TiktokenTokenizer.byte_level()
    (ids, labels), = validation_set(tokenizer, 1, 300)
    assert ids.shape[0] == 5  # a pass key and four attributes
    starts = []
    for row in range(5):
        answer = labels[row][labels[row] != IGNORE].tolist()
        assert answer[-1] == tokenizer.eos_token_id
        start = int((labels[row] != IGNORE).nonzero().min())
        context = tokenizer.decode(ids[row, :start].tolist())
        question = context.rsplit("Question: What is the ", 1)[1].split("?")[0]
        assert tokenizer.decode(answer[:-1]).startswith(f" The {question} is ")
        assert context.count(tokenizer.decode(answer[:-1]).strip()) == 1  # the statement, once, in the document
        starts.append(start)
    document_end = min(starts) - 40
    assert all(torch.equal(ids[0, :document_end], ids[row, :document_end]) for row in range(5))


def test_validation_scores_the_rows_the_document_does_not_answer_apart():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    ids = torch.randint(0, 50, (3, 8))  # one document's three rows; the last is a question it does not answer
    with torch.no_grad():
        predicted = model(input_ids=ids).logits.argmax(-1)
    labels = torch.full_like(ids, IGNORE)
    labels[:, 5:7] = predicted[:, 4:6]  # every row answered right...
    labels[1, 6] = (predicted[1, 5] + 1) % 50  # ...but the second
    scores = validation_accuracy(model, [(ids, labels), (ids, labels)], absent=1)
    assert (scores.stated, scores.silent) == (0.5, 1.0) and scores.all == pytest.approx(2 / 3)
    alone = validation_accuracy(model, [(ids, labels)])
    assert alone.silent is None and alone.all == alone.stated == pytest.approx(2 / 3)
