"""The engine's exact behaviour: cache sizes, kept indices, stabilizers, per-head selection, full-cache equivalence."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch
from helpers.engines import TablePolicy, chunks_of, distinct_table, random_ids
from helpers.models import tiny_model
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from locret_cli.api.plan import ModelFacts, resolve
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies import make_policy
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.transformers_internals import cache_kwargs
from locret_cli.errors import LocretError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings


def expected_kept(table: torch.Tensor, n: int, chunk: int, budget: int, stabilizers: int,
                  pinned: int = 0) -> list[list[int]]:
    """Reference selection in plain Python, chunk by chunk, per head: the first `pinned` and the last `stabilizers`
    entries always stay, the best-scored fill the rest."""
    kept = [[] for _ in range(table.shape[0])]
    for start in range(0, n, chunk):
        for h in range(table.shape[0]):
            candidates = kept[h] + list(range(start, min(start + chunk, n)))
            if len(candidates) > budget:
                fixed = candidates[:pinned] + candidates[len(candidates) - stabilizers:]
                rest = sorted(candidates[pinned: len(candidates) - stabilizers], key=lambda i: -float(table[h, i]))
                candidates = sorted(fixed + rest[: budget - len(fixed)])
            kept[h] = candidates
    return kept


def fresh_layer0_keys(model, ids: list[int]) -> torch.Tensor:
    """Layer 0's keys for `ids` at positions 0..n-1, computed from scratch: (kv_heads, n, head_dim)."""
    layer, config = model.model.layers[0], model.config
    head_dim = config.hidden_size // config.num_attention_heads
    with torch.no_grad():
        hidden = layer.input_layernorm(model.model.embed_tokens(torch.tensor([ids])))
        keys = layer.self_attn.k_proj(hidden).view(1, len(ids), -1, head_dim).transpose(1, 2)
        cos, sin = model.model.rotary_emb(keys, torch.arange(len(ids)).view(1, -1))
        return apply_rotary_pos_emb(keys, keys, cos, sin)[1][0]


def run(model, policy, settings, ids, question=(5, 6, 7), on_progress=None, answering=AnswerSettings()):
    engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})), answering=answering)
    start = engine.clock()
    engine.read(chunks_of(ids, settings.chunk_size), on_progress)
    return engine, engine.answer(list(question), start)


def test_cache_size_after_every_chunk_and_peak(llama):
    n, settings = 100, ReadSettings(budget=24, chunk_size=10, stabilizers=4)
    answering = AnswerSettings(max_new_tokens=3)
    sizes = []
    engine, generation = run(llama, make_policy("streaming", llama), settings, random_ids(n), answering=answering,
                             on_progress=lambda p: sizes.append(p.cache_tokens))
    assert sizes == [min(10 * (i + 1), 24) for i in range(10)]
    assert generation.cache_peak_tokens == 24 + 10  # budget + chunk, never more
    assert generation.document_tokens == n


@pytest.mark.parametrize("pinned", [0, 5])
@pytest.mark.parametrize("positions", ["original", "compact"])
def test_kept_entries_after_every_chunk_are_exactly_the_reference(llama, positions, pinned):
    """Original positions: each head's kept token indices equal the reference selection. Compact: each head's keys
    equal RoPE computed afresh for its kept tokens at 0..n-1, however many times they were moved."""
    n, budget, chunk, stab = 60, 16, 8, 3
    table = distinct_table(2, n)
    settings = ReadSettings(budget=budget, chunk_size=chunk, stabilizers=stab, positions=positions)
    answering = AnswerSettings(max_new_tokens=1)
    assert expected_kept(table, n, chunk, budget, stab)[0] != expected_kept(table, n, chunk, budget, stab)[1]
    ids = random_ids(n)
    engine = Engine(llama, TablePolicy(table), settings, PromptTokens(stop_ids=frozenset({1}), pinned=pinned),
                    answering=answering)
    for chunk_ids in chunks_of(ids, chunk):
        engine.prefill_chunk(chunk_ids.ids)
        reference = expected_kept(table, engine.seen, chunk, budget, stab, pinned)
        assert all(kept[:pinned] == list(range(pinned)) for kept in reference)
        if positions == "original":
            for layer in engine.cache.layers:
                assert layer.positions[0].tolist() == reference
            continue
        for h, kept in enumerate(reference):
            want = fresh_layer0_keys(llama, [ids[i] for i in kept])[h]
            torch.testing.assert_close(engine.cache.layers[0].keys[0, h], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["locret", "streaming", "h2o", "snapkv", "random", "knorm"])
def test_the_prompt_head_is_never_evicted_under_any_policy(llama, name):
    """The first `pinned` tokens (BOS and the chat template's head) hold slots 0..pinned-1 in every head and layer,
    after many evictions, whatever their scores."""
    pinned = 7
    heads = RetainingHeads.for_model(llama, hidden=16) if name == "locret" else None
    settings = ReadSettings(budget=20, chunk_size=10, stabilizers=4, positions="original")
    answering = AnswerSettings(max_new_tokens=1)
    engine = Engine(llama, make_policy(name, llama, heads), settings,
                    PromptTokens(stop_ids=frozenset({1}), pinned=pinned), answering=answering)
    engine.read(chunks_of(random_ids(150), 10))
    for layer in engine.cache.layers:
        positions = layer.positions[0]
        assert positions[:, :pinned].tolist() == [list(range(pinned))] * 2
        assert positions[:, -4:].tolist() == [list(range(146, 150))] * 2  # and the stabilizers


def test_a_prompt_head_that_leaves_no_room_is_refused():
    settings = ReadSettings(budget=16, chunk_size=8, stabilizers=10)
    facts = ModelFacts({}, layers=2, sliding=False, prompt=PromptTokens(pinned=7))
    with pytest.raises(LocretError, match="prompt's opening \\(7 tokens"):
        resolve(facts, replace(settings, policy="streaming"))
    full = replace(settings, policy="full")
    assert resolve(facts, full).read == full  # nothing is evicted: no limit


def test_compact_keeps_the_same_entries_as_original(llama):
    """Layer 0's values depend only on the token, so equal values mean the same tokens were kept."""
    n, table = 60, distinct_table(2, 60)
    layer0 = {}
    for positions in ("original", "compact"):
        settings = ReadSettings(budget=16, chunk_size=8, stabilizers=3, positions=positions)
        answering = AnswerSettings(max_new_tokens=1)
        engine = Engine(llama, TablePolicy(table), settings, PromptTokens(stop_ids=frozenset({1})), answering=answering)
        for chunk in chunks_of(random_ids(n), 8):
            engine.prefill_chunk(chunk.ids)
        layer0[positions] = engine.cache.layers[0].values
    torch.testing.assert_close(layer0["original"], layer0["compact"])


def first_logits(model, policy, settings, ids, question):
    engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})))
    for chunk in chunks_of(ids, settings.chunk_size):
        engine.prefill_chunk(chunk.ids)
    return engine.forward(question, score=False)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "phi3"])
def test_budget_covering_document_equals_full_cache(family):
    """No eviction and original positions: chunked prefill gives the plain model's logits."""
    model = tiny_model(family)
    ids, question = random_ids(200), [5, 6, 7, 8]  # Phi-3 stays below its longrope switch at 256 positions
    heads = RetainingHeads.for_model(model, hidden=32)
    settings = ReadSettings(budget=400, chunk_size=64, stabilizers=8, positions="original")
    got = first_logits(model, LocretPolicy(heads), settings, ids, question)
    with torch.no_grad():
        want = model(torch.tensor([ids + question])).logits[0, -1]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_longrope_switch_moves_cached_keys_to_long_frequencies():
    """Crossing 256 positions switches Phi-3 to its long factors: the first layer's cached keys (which depend only
    on the tokens) must then equal the keys a single long-frequency pass computes. Deeper layers legitimately
    differ: tokens read before the switch were encoded under the short frequencies."""
    model = tiny_model("phi3")
    ids = random_ids(300)
    engine = Engine(model, make_policy("full", model), ReadSettings(budget=400, chunk_size=64, positions="original"),
                    PromptTokens(stop_ids=frozenset({1})))
    for chunk in chunks_of(ids, 64):
        engine.prefill_chunk(chunk.ids)
    reference = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([ids]), **cache_kwargs(model, reference), use_cache=True)
    torch.testing.assert_close(engine.cache.layers[0].keys, reference.layers[0].keys, rtol=1e-5, atol=1e-5)


def test_greedy_answer_equals_generate(llama):
    ids = random_ids(80)
    settings = ReadSettings(budget=200, chunk_size=32, stabilizers=8, positions="original")
    answering = AnswerSettings(max_new_tokens=6)
    _, generation = run(llama, make_policy("full", llama), settings, ids, question=[9, 10], answering=answering)
    with torch.no_grad():
        out = llama.generate(torch.tensor([ids + [9, 10]]), max_new_tokens=6, do_sample=False,
                             eos_token_id=1, pad_token_id=0)
    want = out[0, len(ids) + 2:].tolist()
    assert generation.token_ids == [t for t in want if t != 1][: len(generation.token_ids)]
    assert len(generation.token_ids) == len([t for t in want if t != 1])


def test_reading_and_answering_warn_nothing(llama):
    """transformers 5.24 renamed forward's `past_key_values` to `cache` and warns at the old name (a FutureWarning,
    on stderr even under `-q`): the engine passes its cache by the name the model's forward takes."""
    settings = ReadSettings(budget=24, chunk_size=16, stabilizers=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        _, generation = run(llama, make_policy("h2o", llama), settings, random_ids(64),
                            answering=AnswerSettings(max_new_tokens=3))
    assert generation.document_tokens == 64


def test_full_policy_never_evicts(llama):
    settings = ReadSettings(budget=8, chunk_size=10, stabilizers=2)
    answering = AnswerSettings(max_new_tokens=1)
    _, generation = run(llama, make_policy("full", llama), settings, random_ids(50), question=[3],
                        answering=answering)
    assert generation.cache_peak_tokens == 51


def test_streaming_keeps_sinks_and_recent_window(llama):
    settings = ReadSettings(budget=12, chunk_size=10, stabilizers=2, positions="original")
    answering = AnswerSettings(max_new_tokens=1)
    engine = Engine(llama, make_policy("streaming", llama), settings, PromptTokens(stop_ids=frozenset({1})),
                    answering=answering)
    for chunk in chunks_of(random_ids(50), 10):
        engine.prefill_chunk(chunk.ids)
    assert engine.cache.layers[1].positions[0, 0].tolist() == [0, 1, 2, 3] + list(range(42, 50))


def test_settings_are_checked():
    warnings = []
    assert ReadSettings(budget=100, stabilizers=100).checked(warnings.append).stabilizers == 50
    assert "does not fit" in str(warnings[0])
    for bad in (dict(budget=0), dict(chunk_size=-1), dict(stabilizers=-1), dict(positions="x"), dict(score_pool=0),
                dict(score_pool=4)):
        with pytest.raises(LocretError):
            ReadSettings(**bad).checked(warnings.append)
    for bad in (dict(top_p=0), dict(temperature=-1), dict(max_new_tokens=0)):
        with pytest.raises(LocretError):
            AnswerSettings(**bad).checked()


def test_sampling_is_seeded_and_top_p_narrows_to_the_best(llama):
    logits = torch.tensor([0.0, 3.0, 2.9, -1.0])
    narrow = Engine(llama, make_policy("full", llama), ReadSettings(), PromptTokens(stop_ids=frozenset({1})),
                    answering=AnswerSettings(temperature=1.0, top_p=1e-6))
    assert [narrow.sampler.pick(logits) for _ in range(5)] == [1] * 5
    draws = []
    for _ in range(2):
        engine = Engine(llama, make_policy("full", llama), ReadSettings(), PromptTokens(stop_ids=frozenset({1})),
                        answering=AnswerSettings(temperature=2.0, seed=11))
        draws.append([engine.sampler.pick(logits) for _ in range(20)])
    assert draws[0] == draws[1] and len(set(draws[0])) > 1


def test_forks_answer_like_a_fresh_read(llama):
    """One read, several questions on forks, gives what separate runs give."""
    settings = ReadSettings(budget=16, chunk_size=8, stabilizers=3)
    answering = AnswerSettings(max_new_tokens=4)
    ids = random_ids(60)
    reader = Engine(llama, make_policy("streaming", llama), settings, PromptTokens(stop_ids=frozenset({1})),
                    answering=answering)
    reader.read(chunks_of(ids, 8))
    for question in ([5, 6], [9, 10, 11]):
        _, fresh = run(llama, make_policy("streaming", llama), settings, ids, question=question, answering=answering)
        assert reader.fork().answer(question).token_ids == fresh.token_ids
    assert reader.cache.length() == 16  # the reader itself never saw a question


def cache_state(engine: Engine) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(t.clone() for t in (layer.keys, layer.values, layer.scores, layer.positions))
            for layer in engine.cache.layers]


def test_forks_under_h2o_never_touch_the_reader(llama):
    """H2O adds attention to its scores in place: a fork that answers, or reads on, must leave the reader as it
    was, and two forks must answer alike."""
    settings = ReadSettings(budget=16, chunk_size=8, stabilizers=3)
    answering = AnswerSettings(max_new_tokens=4)
    ids = random_ids(80)
    reader = Engine(llama, make_policy("h2o", llama), settings, PromptTokens(stop_ids=frozenset({1})),
                    answering=answering)
    reader.read(chunks_of(ids[:60], 8))
    before = cache_state(reader)
    first = reader.fork().answer([5, 6]).token_ids
    reading_on = reader.fork()
    reading_on.read(chunks_of(ids[60:], 8))
    assert reading_on.cache.layers[0].scores.shape == before[0][2].shape
    assert not torch.equal(reading_on.cache.layers[0].scores, before[0][2])  # it did rescore its own copy
    for now, then in zip(cache_state(reader), before):
        assert all(torch.equal(a, b) for a, b in zip(now, then))
    assert reader.fork().answer([5, 6]).token_ids == first
    _, fresh = run(llama, make_policy("h2o", llama), settings, ids[:60], question=[5, 6], answering=answering)
    assert fresh.token_ids == first
