"""Every baseline policy's scores, checked against hand-made inputs or a dense reference, and equal cache sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model

from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies import POLICIES, POLICY_NAMES, make_policy, select
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings


def test_knorm_scores_minus_the_key_norm():
    policy = make_policy("knorm", tiny_model("llama"))
    k = torch.zeros(1, 3, 2 * 16)
    k[0, 0, :16], k[0, 1, 16:], k[0, 2] = 3.0, 1.0, 0.5  # token 0: head 0 big; token 1: head 1 small
    scores = policy.score(0, None, k, None, torch.arange(3))
    expected = -torch.tensor([[[12.0, 0.0, 2.0], [0.0, 4.0, 2.0]]])
    torch.testing.assert_close(scores, expected)
    assert select(scores, 2, 0).tolist() == [[[1, 2], [0, 2]]]


def test_random_scores_are_seeded():
    model = tiny_model("llama")
    q = torch.zeros(1, 5, 64)
    a, b = (make_policy("random", model).score(0, q, None, None, torch.arange(5)) for _ in range(2))
    assert torch.equal(a, b) and a.shape == (1, 2, 5) and 0 <= a.min() and a.max() < 1


def dense_probabilities(model, ids):
    """(layers, kv_heads, group, T, T) attention probabilities from the eager implementation."""
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        attentions = model(torch.tensor([ids]), output_attentions=True).attentions
    model.config._attn_implementation = "sdpa"
    kv = model.config.num_key_value_heads
    return torch.stack([a[0].view(kv, -1, len(ids), len(ids)) for a in attentions])


def prefill(model, policy_name, ids, chunk):
    settings = ReadSettings(budget=1000, chunk_size=chunk, stabilizers=0, positions="original")
    engine = Engine(model, make_policy(policy_name, model), settings, PromptTokens(stop_ids=frozenset({1})))
    for c in chunks_of(ids, chunk):
        engine.prefill_chunk(c.ids)
    return engine


def test_h2o_accumulates_the_attention_each_entry_received():
    model, ids = tiny_model("llama"), random_ids(24)
    probs = dense_probabilities(model, ids)
    engine = prefill(model, "h2o", ids, chunk=8)  # three chunks: rows of later chunks see earlier keys
    for layer_idx, layer in enumerate(engine.cache.layers):
        want = probs[layer_idx].sum(dim=(1, 2))  # over query heads of the group and over all queries
        torch.testing.assert_close(layer.scores[0], want, rtol=1e-4, atol=1e-4)


def test_snapkv_rescores_with_the_last_window_pooled():
    model, ids = tiny_model("llama"), random_ids(40)
    probs = dense_probabilities(model, ids)
    engine = prefill(model, "snapkv", ids, chunk=40)
    window = engine.policy.window
    for layer_idx, layer in enumerate(engine.cache.layers):
        observed = probs[layer_idx][:, :, 40 - window:].sum(dim=(1, 2))
        want = F.avg_pool1d(observed[None], 7, stride=1, padding=3, count_include_pad=False)[0]
        torch.testing.assert_close(layer.scores[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("positions", ["compact", "original"])
def test_every_policy_holds_the_same_cache_size_at_every_step(positions):
    model, ids = tiny_model("qwen2"), random_ids(90)
    heads = RetainingHeads.for_model(model, hidden=16)
    settings = ReadSettings(budget=20, chunk_size=16, stabilizers=4, positions=positions)
    sizes = {}
    for name in POLICY_NAMES:
        if name == "full":
            continue
        seen = []
        question = [5, 6, 7] if name == "finch" else None
        policy = make_policy(name, model, heads, question_length=len(question or ()))
        engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})), question_ids=question)
        engine.read(chunks_of(ids, 16), lambda p: seen.append(p.cache_tokens))
        sizes[name] = (seen, engine.cache.peak_tokens)
    assert sizes.pop("finch") == ([16, 20, 20, 20, 20, 20], 36 + 3)  # the question's 3 entries, until dropped
    assert len(set(map(str, sizes.values()))) == 1, sizes
    assert sizes["locret"] == ([16, 20, 20, 20, 20, 20], 36)


def test_locret_score_pool_spreads_each_best_score_to_its_neighbours():
    model = tiny_model("llama")
    heads = RetainingHeads.for_model(model, hidden=8).eval()
    q, k, v = torch.randn(1, 6, 64), torch.randn(1, 6, 32), torch.randn(1, 6, 32)
    raw = make_policy("locret", model, heads).score(0, q, k, v, torch.arange(6))
    pooled = make_policy("locret", model, heads, score_pool=3).score(0, q, k, v, torch.arange(6))
    padded = F.pad(raw, (1, 1), value=float("-inf"))
    expected = torch.stack([padded[..., i:i + 6] for i in range(3)]).amax(0)  # best of self and one either side
    torch.testing.assert_close(pooled, expected)
    assert pooled.shape == raw.shape == (1, 2, 6) and not torch.equal(pooled, raw)


def test_every_named_policy_is_registered_under_its_name():
    assert tuple(POLICIES) == POLICY_NAMES and all(POLICIES[name].name == name for name in POLICY_NAMES)


def test_selected_indices_are_each_heads_best_in_ascending_order():
    scores = torch.rand(2, 3, 50, generator=torch.Generator().manual_seed(0))
    keep = select(scores, 20, 4)
    assert keep.shape == (2, 3, 20) and keep.dtype == torch.int64
    for b in range(2):
        for h in range(3):
            best = scores[b, h, :46].topk(16).indices.tolist()
            assert keep[b, h].tolist() == sorted(best + [46, 47, 48, 49])
