"""The locret read guided by its questions (`--question-share`): the questions, read after every chunk, rank the
entries by their attention; each KV head keeps the entries within the questions' share of the budget by that ranking
or within the rest by the heads'; without questions, or at share 0, the read is the question-agnostic one."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from helpers.attention import reference_finch_scores
from helpers.documents import DOCUMENT
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model

from locret_cli.api import Session, load_session
from locret_cli.api.plan import ModelFacts, resolve
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies import make_policy, select
from locret_cli.core.policies.locret import QUESTION_POOL, LocretPolicy, ranks
from locret_cli.core.shape import ModelShape
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings


def test_ranks_are_each_entry_s_place_best_first():
    scores = torch.tensor([[[0.5, 3.0, -1.0, 2.0]]])
    assert ranks(scores).tolist() == [[[2.0, 0.0, 3.0, 1.0]]]


@pytest.mark.parametrize("share, kept", [(0.5, [0, 1, 8, 9]), (0.25, [0, 1, 2, 9]), (1.0, [6, 7, 8, 9])])
def test_the_budget_is_shared_between_the_heads_ranking_and_the_questions(share, kept):
    policy = LocretPolicy(heads=None, question_share=share, question_length=3)
    heads_scores = -torch.arange(10.0).view(1, 1, 10)  # the heads like entry 0 best, then 1, ...
    policy.attention[0] = torch.arange(10.0).view(1, 1, 10)  # the questions like entry 9 best, then 8, ...
    ranking = policy.ranking(0, heads_scores)
    assert select(ranking, 4, 0).tolist() == [[kept]]
    assert 0 not in policy.attention  # each chunk's attention ranks once
    assert torch.equal(policy.ranking(0, heads_scores), heads_scores)  # no questions read: the heads alone


def heads_for(model) -> RetainingHeads:
    torch.manual_seed(0)
    return RetainingHeads(ModelShape.from_config(model.config))


def test_the_question_ranking_is_finch_s_attention_pooled_over_neighbours():
    model, ids, question = tiny_model("llama"), random_ids(40), random_ids(5, seed=2)
    policy = make_policy("locret", model, heads_for(model), question_share=0.5, question_length=len(question))
    assert policy.reads_question and policy.observes
    settings = ReadSettings(budget=64, chunk_size=40, stabilizers=4, positions="original")
    engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})), question_ids=question)
    engine.prefill_chunk(ids)
    assert engine.seen == 40 and engine.cache.length() == 40  # the question's entries are gone
    for layer_idx, expected in enumerate(reference_finch_scores(model, ids, question)):
        pooled = F.max_pool1d(expected.unsqueeze(0), QUESTION_POOL, stride=1, padding=QUESTION_POOL // 2)
        torch.testing.assert_close(policy.attention[layer_idx], pooled, atol=1e-5, rtol=1e-4)


def read_keeping(model, heads, share: float, question: list[int]) -> list[list[int]]:
    policy = make_policy("locret", model, heads, question_share=share, question_length=len(question))
    settings = ReadSettings(budget=24, chunk_size=8, stabilizers=4, positions="compact")
    engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})), question_ids=question)
    for chunk in chunks_of(random_ids(96), 8):
        engine.prefill_chunk(chunk.ids)
        for layer in engine.cache.layers:
            assert layer.length == min(engine.seen, 24) and int(layer.origins.max()) < engine.seen
    return [sorted(layer.origins[0, 0].tolist()) for layer in engine.cache.layers]


def test_a_guided_read_keeps_other_entries_and_at_share_0_is_the_heads_read():
    model = tiny_model("llama")
    heads, question = heads_for(model), random_ids(6, seed=3)
    plain = read_keeping(model, heads, 0.0, [])
    assert read_keeping(model, heads, 0.0, question) == plain  # share 0: the questions are not read
    assert read_keeping(model, heads, 0.5, question) != plain


FACTS = ModelFacts({"budget": 300, "stabilizers": 64}, layers=8, sliding=False, prompt=PromptTokens(pinned=5))


def planned(read: dict, **options):
    return resolve(FACTS, {"policy": "locret", **read}, None, **options)


def test_a_plan_reads_for_its_questions_only_at_a_share_above_0():
    guided = planned({"question_share": 0.5}, questions=["Who?"], defer=True)
    assert guided.read_for == ("Who?",) and guided.defer  # left for an answer that needs the cache, as locret's
    assert planned({"question_share": 0.5}, questions=()).read_for == ()  # `read`: agnostic
    assert planned({}, questions=["Who?"]).read_for == ()
    with pytest.raises(SettingError, match="question_share must be"):
        planned({"question_share": 1.5})
    with pytest.raises(SettingError, match="lazy_after prunes tokens before the questions are read"):
        planned({"question_share": 0.5, "lazy_after": 2}, questions=["Who?"])
    unguided = planned({"question_share": 0.5, "lazy_after": 2}, questions=())  # `read`: no question to be late for
    assert unguided.read.lazy_after == 2 and unguided.read_for == ()


def test_ask_reads_for_its_question_and_a_saved_read_without_questions_serves_any(tmp_path):
    embedded = load_session(device="cpu")
    guided = Session(replace(embedded.loaded, defaults={**embedded.loaded.defaults, "question_share": 0.5}),
                     embedded.heads)
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    question = "What is the gate code of the north depot?"
    result = guided.ask(str(path), question)
    assert result.read_for == (question,) and "4821" in result.answer
    assert guided.read(str(path)).read_for == ()
