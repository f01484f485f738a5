"""Lazy prefill: the rule, the entries it leaves out, a reference implementation of it, and nothing changed when off."""

from __future__ import annotations

import json
import random
import textwrap

import pytest
import torch
from helpers.engines import TablePolicy, chunks_of, random_ids
from helpers.models import tiny_model
from transformers import DynamicCache
from typer.testing import CliRunner

from locret_cli.api import load_session
from locret_cli.api.plan import ModelFacts, resolve
from locret_cli.api.saved_context import save_reading
from locret_cli.bench.synthetic import filler_sentence
from locret_cli.cli import app
from locret_cli.core.engine import Engine
from locret_cli.core.lazy_prefill import flowing_tokens
from locret_cli.core.policies import make_policy
from locret_cli.core.transformers_internals import cache_kwargs
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings

LAYERS, AFTER = 4, 2
SETTINGS = ReadSettings(budget=20, chunk_size=16, stabilizers=4, positions="original", lazy_after=AFTER)


def python_keep(candidates: list[int], table: torch.Tensor, budget: int, stabilizers: int) -> list[int]:
    """Plain-Python eviction of token indices `candidates` (ascending) by table row 0: the last `stabilizers`
    stay, the best-scored fill the rest of `budget`."""
    if len(candidates) <= budget:
        return candidates
    fixed = candidates[len(candidates) - stabilizers:]
    rest = sorted(candidates[: len(candidates) - stabilizers], key=lambda t: -float(table[0, t]))
    return sorted(fixed + rest[: budget - len(fixed)])


def python_flowing(held: list[int], new: list[int], table, budget, stabilizers) -> list[int]:
    kept = set(python_keep(held + new, table, budget, stabilizers))
    return [t for t in new if t in kept or t == new[-1]]


def shared_table(tokens: int, kv_heads: int = 2) -> torch.Tensor:
    """Random scores, the same in every KV head, so each head keeps the same tokens (one DynamicCache can hold
    them)."""
    row = torch.rand(tokens, generator=torch.Generator().manual_seed(3))
    return row.expand(kv_heads, tokens).contiguous()


def reference_run(model, table, ids, question, settings, max_new):
    """The rule written out with the model's own modules and a DynamicCache: each chunk runs through the first
    `lazy_after` layers whole and through the rest on its flowing tokens only, each layer with its own mask; then
    every layer evicts by the table. Returns each layer's held tokens and keys once the document is read, how many
    tokens were pruned, and the greedy answer."""
    decoder, rotary = model.model, model.model.rotary_emb
    cache, held = DynamicCache(config=model.config), [[] for _ in decoder.layers]

    def run(tokens: list[int], flowing: list[int]) -> torch.Tensor:
        hidden = decoder.embed_tokens(torch.tensor([[ids_all[t] for t in tokens]]))
        for i, layer in enumerate(decoder.layers):
            these = tokens if i < settings.lazy_after else flowing
            if i == settings.lazy_after:
                hidden = hidden[:, [tokens.index(t) for t in flowing]]
            position_ids = torch.tensor([these])
            own = torch.full((len(these), len(these)), float("-inf")).triu(1)
            mask = torch.cat([torch.zeros(len(these), len(held[i])), own], dim=1)[None, None]
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rotary(hidden, position_ids),
                           position_ids=position_ids, **cache_kwargs(layer, cache))
            held[i] += these
        return model.lm_head(decoder.norm(hidden[:, -1]))[0]

    ids_all, pruned = ids + question, 0
    with torch.no_grad():
        for start in range(0, len(ids), settings.chunk_size):
            new = list(range(start, min(start + settings.chunk_size, len(ids))))
            flowing = python_flowing(held[settings.lazy_after - 1], new, table, settings.budget, settings.stabilizers)
            pruned += len(new) - len(flowing)
            run(new, flowing)
            for i, layer in enumerate(cache.layers):
                keep = python_keep(held[i], table, settings.budget, settings.stabilizers)
                index = torch.tensor([held[i].index(t) for t in keep])
                layer.keys, layer.values = layer.keys[:, :, index], layer.values[:, :, index]
                held[i] = keep
        read = [list(tokens) for tokens in held], [layer.keys.clone() for layer in cache.layers]
        asked = list(range(len(ids), len(ids) + len(question)))
        answer, token = [], int(run(asked, asked).argmax())
        while token != 1 and len(answer) < max_new:
            answer.append(token)
            ids_all.append(token)
            token = int(run([len(ids_all) - 1], [len(ids_all) - 1]).argmax())
    return *read, pruned, answer


def test_rule_keeps_what_some_head_keeps_and_the_last_token():
    scores = torch.tensor([[[9., 8, 7, 6, 1, 5, 2, 0.5]], [[9., 8, 7, 6, 1, 2, 5, 0.4]]]).transpose(0, 1)  # (1, 2, 8)
    origins = torch.arange(8).expand(1, 2, 8)
    # budget 5 of 8, the last 4 new: each head keeps 4 old entries and one new (head 0: token 5, head 1: token 6)
    flowing = flowing_tokens(scores, origins, new=4, budget=5, stabilizers=0, pinned=0, span=1, share=1.0)
    assert flowing.tolist() == [1, 2, 3]  # token 4 pruned; 5 and 6 kept by one head each; 7, the last, always
    # 2 stabilizers (tokens 6 and 7) leave room for 3 more, and old tokens 0-2 outscore every new one
    assert flowing_tokens(scores, origins, 4, 5, stabilizers=2, pinned=0, span=1, share=1.0).tolist() == [2, 3]
    assert flowing_tokens(scores, origins, 4, 5, stabilizers=0, pinned=0, span=1, share=0.1) is None
    assert flowing_tokens(scores, origins, 4, budget=8, stabilizers=0, pinned=0, span=1, share=1.0) is None


def test_share_readmits_the_best_scored_pruned_tokens():
    scores = torch.tensor([[[9., 9, 9, 1, 2, 3, 4, 5, 6]]])  # 3 old entries, 6 new; budget 4 keeps the old and 8
    origins = torch.arange(9).expand(1, 1, 9)
    assert flowing_tokens(scores, origins, 6, 4, 0, 0, 1, share=1.0).tolist() == [5]
    assert flowing_tokens(scores, origins, 6, 4, 0, 0, 1, share=0.5).tolist() == [3, 4, 5]  # 3 of 6 pruned at most


def test_the_flowing_count_is_rounded_up_to_a_step_with_the_best_scored():
    scores = torch.tensor([[[9., 9, 9, 1, 2, 3, 4, 5, 6]]])
    origins = torch.arange(9).expand(1, 1, 9)
    assert flowing_tokens(scores, origins, 6, 4, 0, 0, 1, share=1.0, step=4).tolist() == [2, 3, 4, 5]
    assert flowing_tokens(scores, origins, 6, 4, 0, 0, 1, share=1.0, step=6) is None


def test_pruned_tokens_have_no_entries_above_the_cut():
    model, ids = tiny_model("llama", layers=LAYERS), random_ids(48)
    table = torch.rand(2, 64, generator=torch.Generator().manual_seed(5))
    engine = Engine(model, TablePolicy(table), SETTINGS, PromptTokens(stop_ids=frozenset({1})))
    *first, last = chunks_of(ids, SETTINGS.chunk_size)
    for chunk in first:
        engine.prefill_chunk(chunk.ids)
    held = engine.cache.layers[AFTER - 1].origins[0].tolist()  # per head
    engine.forward(last.ids, score=True)
    new = list(range(32, 48))
    some_head_keeps = set()
    for h in range(2):
        candidates = held[h] + new
        order = sorted(candidates[:-4], key=lambda t: -float(table[h, t]))
        some_head_keeps |= set(order[:16]) | set(new[-4:])
    flowing = [t for t in new if t in some_head_keeps or t == 47]
    assert len(flowing) < len(new)
    for i, layer in enumerate(engine.cache.layers):
        chunk_entries = layer.origins[0, 0, -(16 if i < AFTER else len(flowing)):].tolist()
        assert chunk_entries == (new if i < AFTER else flowing)
    engine.evict()
    assert [layer.length for layer in engine.cache.layers] == [SETTINGS.budget] * LAYERS


class ObservedTablePolicy(TablePolicy):
    """TablePolicy read through the attention observer: the model then attends with SDPA and its mask, which the
    layers above the cut get sliced."""

    observes = True

    def observe(self, layer_idx, query, key, scaling, layer):
        pass


@pytest.mark.parametrize("policy", [TablePolicy, ObservedTablePolicy])
def test_engine_matches_a_reference_implementation_of_the_rule(policy):
    model, ids, question = tiny_model("llama", layers=LAYERS, seed=2), random_ids(64, seed=4), [5, 6, 7]
    table = shared_table(80)
    answering = AnswerSettings(max_new_tokens=6)
    engine = Engine(model, policy(table), SETTINGS, PromptTokens(stop_ids=frozenset({1})), answering=answering)
    engine.read(chunks_of(ids, SETTINGS.chunk_size))
    held, keys, pruned, answer = reference_run(model, table, ids, question, SETTINGS, 6)
    assert pruned > 0 and len(answer) > 0
    for layer, tokens, reference_keys in zip(engine.cache.layers, held, keys):
        assert layer.origins[0, 0].tolist() == tokens
        torch.testing.assert_close(layer.keys, reference_keys, rtol=1e-4, atol=1e-5)
    assert engine.answer(question).token_ids == answer


@pytest.fixture(scope="module")
def session():
    return load_session(device="cpu")


def document(path, seed: int, fact: str | None = None) -> str:
    """About 20K tokens of generated filler, with `fact` in the middle."""
    lines = textwrap.wrap(" ".join(filler_sentence(random.Random(seed)) for _ in range(700)), 80)
    if fact:
        lines.insert(len(lines) // 2, fact)
    path.write_text("\n".join(lines))
    return str(path)


@pytest.mark.parametrize("lazy,same_as", [
    (dict(lazy_after=2, lazy_share=0.0001), {}),  # the rule would prune, but the share allows none
    (dict(lazy_after=2, budget=100_000), dict(budget=100_000)),  # nothing is evicted, so nothing is pruned
])
def test_with_nothing_pruned_the_cache_is_the_same_bit_for_bit(session, tmp_path, lazy, same_as):
    path = document(tmp_path / "doc.txt", seed=4)
    hooked = session.read(path, settings=session.plan(read={**lazy}).read).engine
    plain = session.read(path, settings=session.plan(read={**same_as}).read).engine
    assert plain.document_tokens > 3 * session.plan().read.budget
    for a, b in zip(hooked.cache.layers, plain.cache.layers, strict=True):
        assert a.tensors().keys() == b.tensors().keys()
        assert all(torch.equal(a.tensors()[name], b.tensors()[name]) for name in a.tensors())


def test_a_pruned_read_answers_and_leaves_every_layer_at_the_budget(session, tmp_path):
    fact = "The gate code of the north depot is 4821."
    reading = session.read(document(tmp_path / "doc.txt", 6, fact), settings=session.plan(read={"lazy_after": 2}).read)
    budget = reading.engine.settings.budget
    assert [layer.length for layer in reading.engine.cache.layers] == [budget] * 4
    assert reading.ask("What is the gate code of the north depot?").answer == fact


def test_lazyllm_scores_by_the_last_tokens_attention_and_prunes_by_default():
    model = tiny_model("llama", layers=LAYERS)
    facts = ModelFacts({}, LAYERS, False, PromptTokens())
    settings = resolve(facts, ReadSettings(policy="lazyllm", budget=20, chunk_size=16, stabilizers=4)).read
    assert settings.lazy_after == 1  # a quarter of the way up, unless given
    engine = Engine(model, make_policy("lazyllm", model), settings, PromptTokens(stop_ids=frozenset({1})))
    captured, observe = {}, engine.policy.observe

    def keep_query(layer_idx, query, key, scaling, layer):
        captured[layer_idx] = query[:, :, -1:].clone(), key.clone(), scaling
        observe(layer_idx, query, key, scaling, layer)

    ids = random_ids(32)
    engine.prefill_chunk(ids[:16])
    engine.policy.observe = keep_query
    engine.forward(ids[16:], score=True)
    query, key, scaling = captured[0]
    attention = ((query @ key.repeat_interleave(2, dim=1).transpose(-1, -2)) * scaling).softmax(-1)[:, :, 0]
    torch.testing.assert_close(engine.cache.layers[0].scores, attention.view(1, 2, 2, -1).mean(2))
    assert engine.pruned_tokens > 0


@pytest.mark.parametrize("policy,after,message", [
    ("full", 1, "policy full has none to prune by"),
    ("finch", 1, "policy finch has none to prune by"),
    ("h2o", 4, "lazy_after must be below the model's 4 layers, got 4"),
])
def test_refusals(policy, after, message):
    settings = ReadSettings(policy=policy, budget=20, chunk_size=16, stabilizers=4, lazy_after=after)
    with pytest.raises(SettingError) as refused:
        resolve(ModelFacts({}, LAYERS, False, PromptTokens()), settings, questions=["What is it?"])
    assert message in str(refused.value)


def test_cli_reads_lazily_reports_it_and_refuses_bad_values(tmp_path):
    fact = "The gate code of the north depot is 4821."
    path = document(tmp_path / "doc.txt", 6, fact)
    question = "What is the gate code of the north depot?"
    result = CliRunner().invoke(app, ["ask", path, question, "--lazy-after", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["answer"] == fact and (data["lazy_after"], data["lazy_share"]) == (2, 1.0)
    assert 0 < data["kv_cache"]["lazy_pruned_tokens"] < data["document"]["tokens"]
    table = CliRunner().invoke(app, ["ask", path, question, "--lazy-after", "2", "--lazy-share", "0.25"])
    flowed = data["document"]["tokens"] - data["kv_cache"]["lazy_pruned_tokens"]
    assert "lazy prefill: tokens past layer 2" in table.stderr and f"{flowed:,} of" not in table.stderr
    for flags, message in ((["--lazy-after", "4"], "--lazy-after must be below the model's 4 layers, got 4"),
                           (["--lazy-share", "0"], "--lazy-share must be in (0, 1], got 0")):
        refused = CliRunner().invoke(app, ["ask", path, question, *flags])
        assert refused.exit_code != 0 and "Traceback" not in refused.output
        assert [line for line in refused.stderr.splitlines() if line.startswith("error")] == [f"error: {message}"]


def test_a_lazy_reading_saves_and_loads_with_its_settings(session, tmp_path):
    fact = "The gate code of the north depot is 4821."
    reading = session.read(document(tmp_path / "doc.txt", 6, fact), settings=session.plan(read={"lazy_after": 2, "lazy_share": 0.5}).read)
    save_reading(reading, tmp_path / "doc.locret")
    loaded = session.open(str(tmp_path / "doc.locret"))
    assert (loaded.settings.lazy_after, loaded.settings.lazy_share) == (2, 0.5)
    question = "What is the gate code of the north depot?"
    assert loaded.ask(question).answer == reading.ask(question).answer == fact
