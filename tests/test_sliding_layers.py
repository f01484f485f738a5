"""Models that mix sliding and global layers (Gemma 3): a sliding layer holds its window of the most recent entries,
as the model was trained to read them, and only the global layers are evicted."""

from __future__ import annotations

import pytest
import torch
from helpers.byte_tokenizers import byte_tokenizer
from helpers.engines import chunks_of, random_ids
from helpers.models import COMMON, GEMMA3_WINDOW, tiny_model
from transformers import MistralConfig, MistralForCausalLM

from locret_cli.api import Session
from locret_cli.api.saved_context import LAYER_TENSORS, save_reading
from locret_cli.core.engine import Engine
from locret_cli.core.measure import plan_memory
from locret_cli.core.policies import POLICIES, make_policy
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.models.loading import LoadedModel
from locret_cli.settings import AnswerSettings, ReadSettings

SLIDING, GLOBAL = (0, 1), (2,)  # the tiny Gemma 3's layers
EVICTING = [name for name, policy in POLICIES.items() if name not in ("full", "lazyllm", "locret")]


@pytest.fixture(scope="module")
def gemma3():
    return tiny_model("gemma3")


def reference(model, ids: list[int]):
    """transformers' own forward over all of `ids`: (logits (n, vocab), hidden states after each layer)."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    return out.logits[0], out.hidden_states


def read(model, policy: str, settings: ReadSettings, ids: list[int], **engine) -> Engine:
    policy = make_policy(policy, model)
    question = [9, 10] if policy.reads_question else None
    engine = Engine(model, policy, settings, PromptTokens(stop_ids=frozenset({1})), question_ids=question, **engine)
    engine.read(chunks_of(ids, settings.chunk_size))
    return engine


@pytest.mark.parametrize("positions", ["compact", "original"])
def test_chunked_reads_give_transformers_logits_while_nothing_is_evicted(gemma3, positions):
    ids = random_ids(75)
    engine = read(gemma3, "streaming", ReadSettings(budget=4096, chunk_size=16, stabilizers=4, positions=positions),
                  ids[:64])
    assert [layer.length for layer in engine.cache.layers] == [GEMMA3_WINDOW - 1] * 2 + [64]
    logits, _ = reference(gemma3, ids)
    assert torch.allclose(engine.forward(ids[64:], score=False), logits[-1], atol=1e-5)


@pytest.mark.parametrize("positions", ["compact", "original"])
@pytest.mark.parametrize("policy", EVICTING)
def test_only_global_layers_lose_entries_and_sliding_layers_hold_exactly_their_window(gemma3, policy, positions):
    """The sliding layers below the first global one never see an evicted entry: their output for the next tokens is
    the full model's, through every eviction and (compact) renumbering."""
    ids = random_ids(75)
    settings = ReadSettings(budget=24, chunk_size=16, stabilizers=4, positions=positions)
    engine = read(gemma3, policy, settings, ids[:64])
    window = list(range(64 - GEMMA3_WINDOW + 1, 64))
    for index in SLIDING:
        layer = engine.cache.layers[index]
        assert layer.origins[0, 0].tolist() == window
        want = window if positions == "original" else list(range(24 - len(window), 24))
        assert layer.positions[0, 0].tolist() == want
    assert engine.cache.layers[GLOBAL[0]].length == engine.cache.length() == 24
    seen = {}
    hook = gemma3.model.layers[SLIDING[-1]].register_forward_hook(lambda module, args, out: seen.update(out=out))
    try:
        engine.forward(ids[64:], score=False)
    finally:
        hook.remove()
    _, hidden = reference(gemma3, ids)
    output = seen["out"][0] if isinstance(seen["out"], tuple) else seen["out"]
    assert torch.allclose(output[0], hidden[SLIDING[-1] + 1][0, 64:], atol=1e-5)


def test_a_greedy_answer_equals_generate_and_sliding_layers_stay_bounded(gemma3):
    ids, question = random_ids(70), [9, 10, 11]
    answering = AnswerSettings(max_new_tokens=80, stop_repeats=0)
    engine = read(gemma3, "full", ReadSettings(budget=4096, chunk_size=16, stabilizers=4, positions="original"), ids,
                  answering=answering)
    generation = engine.fork().answer(question)
    with torch.no_grad():
        out = gemma3.generate(torch.tensor([ids + question]), max_new_tokens=80, do_sample=False, eos_token_id=1,
                              pad_token_id=0)
    want = out[0, len(ids) + len(question):].tolist()
    assert generation.token_ids == want[:len(generation.token_ids)] and len(generation.token_ids) >= 60
    assert engine.cache.layers[0].length == GEMMA3_WINDOW - 1  # the reading itself is untouched by its fork


def test_lazy_prefill_is_refused_on_a_model_with_sliding_layers(gemma3):
    with pytest.raises(SettingError, match="sliding layers must see every token"):
        Session(LoadedModel(gemma3, byte_tokenizer(), "tiny gemma3", {"policy": "streaming"}), None).plan(read={"budget": 64, "chunk_size": 16, "stabilizers": 4, "lazy_after": 1}).read


@pytest.mark.parametrize("kv_bits", [16, 8])
def test_a_saved_reading_of_a_sliding_model_round_trips(gemma3, tmp_path, kv_bits):
    session = Session(LoadedModel(gemma3, byte_tokenizer(), "tiny gemma3", {"policy": "streaming"}), None)
    document = tmp_path / "doc.txt"
    document.write_text("The gate code of the north depot is 4821. " * 12)
    settings = ReadSettings(policy="streaming", budget=48, chunk_size=32, stabilizers=8, kv_bits=kv_bits)
    answering = AnswerSettings(max_new_tokens=8)
    reading = session.read(str(document), settings)
    save_reading(reading, tmp_path / "doc.locret")
    loaded = session.open(str(tmp_path / "doc.locret"))
    for original, restored in zip(reading.engine.cache.layers, loaded.engine.cache.layers):
        assert original.length == restored.length
        for name in LAYER_TENSORS:
            assert torch.equal(getattr(original, name), getattr(restored, name)), name
    assert [layer.length for layer in loaded.engine.cache.layers] == [GEMMA3_WINDOW - 1] * 2 + [48]
    assert reading.ask("What is the gate code?", answering).answer == loaded.ask("What is the gate code?",
                                                                                   answering).answer


def test_the_cache_is_reported_and_planned_per_kind_of_layer(gemma3, tmp_path):
    """Sliding layers peak at their window and one chunk (or question), whatever the document's length; `--json` says
    so per kind, and the memory plan counts them the same way."""
    session = Session(LoadedModel(gemma3, byte_tokenizer(), "tiny gemma3", {"policy": "streaming"}), None)
    document = tmp_path / "doc.txt"
    document.write_text("The gate code of the north depot is 4821. " * 12)
    chunk = 64  # longer than the question
    settings = ReadSettings(policy="streaming", budget=48, chunk_size=chunk, stabilizers=8)
    result = session.ask(str(document), "What is the gate code?", settings, AnswerSettings(max_new_tokens=4))
    cache = result.kv_cache
    kinds = result.to_json()["kv_cache"]["by_kind"]
    entry = 2 * (3 * 16 * 4 + 12)  # 2 KV heads: keys, values, unrotated keys (16 fp32); score, position, origin
    assert kinds["sliding"]["layers"] == 2 and kinds["global"]["layers"] == 1
    assert kinds["sliding"]["peak_bytes"] == 2 * (GEMMA3_WINDOW - 1 + chunk) * entry
    assert kinds["global"]["peak_bytes"] == (48 + chunk) * entry
    tokens = kinds["global"]["full_cache_bytes"] // (2 * 2 * 16 * 4)
    assert tokens > 400 and kinds["sliding"]["full_cache_bytes"] == 2 * GEMMA3_WINDOW * 2 * 2 * 16 * 4
    assert cache.full_cache_bytes == kinds["global"]["full_cache_bytes"] + kinds["sliding"]["full_cache_bytes"]
    plan = plan_memory(gemma3, cache.peak_tokens, chunk, keys_move=True)
    assert plan.cache_bytes == cache.peak_bytes == kinds["sliding"]["peak_bytes"] + kinds["global"]["peak_bytes"]


def test_a_model_whose_every_layer_slides_reads_like_transformers_under_any_budget():
    """Mistral v0.1's shape: every layer slides, so nothing the model would see is ever evicted, and compact
    renumbering keeps each window's distances."""
    model = MistralForCausalLM(MistralConfig(**{**COMMON, "num_hidden_layers": 2}, num_key_value_heads=2,
                                             sliding_window=GEMMA3_WINDOW)).eval()
    model.config._attn_implementation = "sdpa"
    ids = random_ids(75)
    engine = read(model, "streaming", ReadSettings(budget=6, chunk_size=16, stabilizers=2), ids[:64])
    assert [layer.length for layer in engine.cache.layers] == [GEMMA3_WINDOW - 1] * 2
    logits, _ = reference(model, ids)
    assert torch.allclose(engine.forward(ids[64:], score=False), logits[-1], atol=1e-5)
