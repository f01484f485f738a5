"""The embedded-model diagnostics: the label oracle keeps exactly each layer's top-labelled entries, and answers are
classified by type and error as documented."""

from __future__ import annotations

import pytest
import torch
from helpers.models import VOCAB

from benchmarks.embedded.diagnose import (
    LabelOracle,
    StatementKeeper,
    depth_table,
    error_kind,
    kept_share,
    kept_table,
    value_type,
)
from locret_cli.bench.synthetic import Fact
from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.policies.streaming import StreamingPolicy
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings


def fact(answer: str, kind: str = "attribute") -> Fact:
    return Fact(f"The x of y is {answer}.", "What is the x of y?", answer, kind)


def test_label_oracle_keeps_each_layers_top_labelled_entries(llama):
    n, budget = 40, 8
    layers, kv_heads = llama.config.num_hidden_layers, llama.config.num_key_value_heads
    labels = torch.randn(layers, kv_heads, n, generator=torch.Generator().manual_seed(3))
    settings = ReadSettings(budget=budget, chunk_size=n, stabilizers=0, positions="original")
    engine = Engine(llama, LabelOracle(labels), settings, PromptTokens(stop_ids=frozenset({1})))
    engine.prefill_chunk(torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(4)).tolist())
    for layer_idx, layer in enumerate(engine.cache.layers):
        for head in range(kv_heads):
            expected = sorted(labels[layer_idx, head].topk(budget).indices.tolist())
            assert layer.positions[0][head].tolist() == expected


def test_label_oracle_refuses_tokens_it_has_no_label_for(llama):
    labels = torch.zeros(llama.config.num_hidden_layers, llama.config.num_key_value_heads, 4)
    engine = Engine(llama, LabelOracle(labels), ReadSettings(budget=2, chunk_size=6, stabilizers=0),
                    PromptTokens(stop_ids=frozenset({1})))
    with pytest.raises(ValueError, match="tokenized differently"):
        engine.prefill_chunk([5, 6, 7, 8, 9, 10])


def test_statement_keeper_keeps_statements_in_the_named_layers_only(llama):
    n, budget, spans = 48, 12, [(5, 9), (30, 34)]
    torch.manual_seed(0)
    heads = RetainingHeads.for_model(llama, hidden=8).eval()
    settings = ReadSettings(budget=budget, chunk_size=16, stabilizers=0, positions="original")
    engine = Engine(llama, StatementKeeper(LocretPolicy(heads), spans, {1}), settings,
                    PromptTokens(stop_ids=frozenset({1})))
    for start in range(0, n, 16):
        engine.prefill_chunk(torch.randint(2, VOCAB, (16,), generator=torch.Generator().manual_seed(start)).tolist())
    statement = [5, 6, 7, 8, 30, 31, 32, 33]
    origins = [layer.origins[0] for layer in engine.cache.layers]
    assert all(set(statement) <= set(head.tolist()) for head in origins[1])
    assert not all(set(statement) <= set(head.tolist()) for head in origins[0])  # the heads alone drop some


def test_statement_keeper_over_recency_keeps_statements_in_every_layer_and_the_newest_entries_besides(llama):
    n, budget, spans = 48, 12, [(5, 9), (20, 22)]
    settings = ReadSettings(budget=budget, chunk_size=16, stabilizers=0, positions="original")
    rest = StreamingPolicy(llama.config.num_key_value_heads, sinks=0)
    engine = Engine(llama, StatementKeeper(rest, spans), settings, PromptTokens(stop_ids=frozenset({1})))
    for start in range(0, n, 16):
        engine.prefill_chunk(torch.randint(2, VOCAB, (16,), generator=torch.Generator().manual_seed(start)).tolist())
    for layer in engine.cache.layers:
        for head in layer.origins[0]:
            assert head.tolist() == [5, 6, 7, 8, 20, 21, *range(n - 6, n)]


def test_answers_are_classified_by_type_and_error():
    facts = [fact("48213", "passkey"), fact("907"), fact("Kalomi"), fact("lantern")]
    assert [value_type(f) for f in facts] == ["pass key", "number", "name", "word"]
    assert error_kind("The x of y is 907.", facts[1], facts) == "right"
    assert error_kind("907", facts[1], facts) == error_kind("The x of z is 907.", facts[1], facts) \
        == "right value, sentence off"
    assert error_kind("The x of y is lantern.", facts[1], facts) == "another fact's value"
    assert error_kind("The x of y is 90.", facts[1], facts) == "garbled copy"
    assert error_kind("The x of y is juniper.", facts[3], facts) == "other"


def test_kept_share_counts_a_statements_entries_over_every_layer_and_head():
    cache = LocretCache(2, reserved=8)
    for layer in cache.layers:
        cache.stage(torch.arange(8), torch.arange(8))
        layer.update(torch.zeros(1, 2, 8, 4), torch.zeros(1, 2, 8, 4))
    cache.evict(0, torch.tensor([[[2, 3, 4, 5], [0, 1, 6, 7]]]))  # layer 0: head 0 keeps tokens 2-5, head 1 none
    cache.evict(1, torch.tensor([[[0, 2, 4, 6], [1, 3, 5, 7]]]))  # layer 1: each head keeps 2 of 2..5
    assert kept_share(cache, 2, 6) == (4 + 0 + 2 + 2) / (4 * 4)
    assert kept_share(cache, 0, 8) == 0.5


def test_depth_and_kept_tables_bin_outcomes():
    rows = [("locret", 1000, 0.05, True), ("locret", 1000, 0.19, False), ("locret", 1000, 0.99, True)]
    assert "| locret | 1,000 | 1/2 | - | - | - | 1/1 |" in depth_table(rows)
    kept = [("locret", 1000, 1.0, True), ("locret", 1000, 0.6, False), ("locret", 1000, 0.1, False)]
    assert "| locret | 1,000 | 1/1 | 0/1 | - | 0/1 |" in kept_table(kept)
