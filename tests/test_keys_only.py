"""A read's last layer computes its keys and values alone (`core/keys_only.py`): the cache a read leaves, and the
answers asked of it, are bit for bit those of whole forwards in every family, with a policy that scores and one that
observes attention; inside, the last layer's output projection and MLP compute nothing; their forwards come back on
exit, another wrapper's included; the bench counts the products not done."""

from __future__ import annotations

import types
from contextlib import nullcontext

import pytest
import torch
from helpers.engines import TablePolicy, chunks_of, distinct_table, random_ids
from helpers.models import tiny_model

from locret_cli.bench.flops import FlopCounter, counting
from locret_cli.core import engine as engine_module
from locret_cli.core.engine import Engine
from locret_cli.core.keys_only import in_force, keys_and_values_only, skipped_parameters
from locret_cli.core.policies.attention import H2OPolicy
from locret_cli.core.shape import ModelShape
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3"]
SETTINGS = ReadSettings(budget=40, chunk_size=16, stabilizers=4)
DOCUMENT, QUESTION = random_ids(160), [3, 4, 5, 6, 7, 8]


def policy_for(kind: str, model):
    shape = ModelShape.from_config(model.config)
    return TablePolicy(distinct_table(shape.kv_heads, 400)) if kind == "scored" else H2OPolicy(shape.head_dim)


def read_and_ask(model, policy) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor, list[int]]:
    """Each cache layer's tensors after a read of DOCUMENT, the question's logits on a fork, and a greedy answer."""
    engine = Engine(model, policy, SETTINGS, PromptTokens(stop_ids=frozenset()),
                    answering=AnswerSettings(max_new_tokens=8))
    engine.read(chunks_of(DOCUMENT, SETTINGS.chunk_size))
    tensors = [{name: t.clone() for name, t in layer.tensors().items()} for layer in engine.cache.layers]
    logits = engine.fork().forward(QUESTION, score=False)
    return tensors, logits, engine.answer(QUESTION).token_ids


@pytest.mark.parametrize("kind", ["scored", "observed"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_read_leaves_the_cache_and_answers_of_whole_forwards_bit_for_bit(family, kind, monkeypatch):
    model = tiny_model(family)
    with torch.no_grad():
        kept, logits, answer = read_and_ask(model, policy_for(kind, model))
        with monkeypatch.context() as whole:
            whole.setattr(engine_module, "keys_and_values_only", lambda _model: nullcontext())
            kept_whole, logits_whole, answer_whole = read_and_ask(model, policy_for(kind, model))
    assert len(kept) == len(kept_whole) == model.config.num_hidden_layers
    for layer, layer_whole in zip(kept, kept_whole, strict=True):
        assert layer.keys() == layer_whole.keys()
        for name in layer:
            assert torch.equal(layer[name], layer_whole[name]), name
    assert torch.equal(logits, logits_whole) and answer == answer_whole


def runs(module: torch.nn.Module) -> list[int]:
    """A list that grows by one each time `module` runs (its hook stays for the test's model only)."""
    calls: list[int] = []
    module.register_forward_hook(lambda *_: calls.append(1))
    return calls


def test_inside_the_last_layer_runs_no_output_projection_or_mlp_and_the_others_do():
    model = tiny_model("qwen2")
    first, last = model.model.layers[0], model.model.layers[-1]
    last_down, first_down, last_v = runs(last.mlp.down_proj), runs(first.mlp.down_proj), runs(last.self_attn.v_proj)
    entering: list[torch.Tensor] = []
    last.register_forward_pre_hook(
        lambda _m, args, kwargs: entering.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    ids = torch.tensor([random_ids(12)])
    with torch.no_grad():
        with keys_and_values_only(model):
            assert in_force(model)
            hidden = model.model(input_ids=ids).last_hidden_state
        assert not in_force(model)
        assert (len(last_down), len(first_down), len(last_v)) == (0, 1, 1)
        whole = model.model(input_ids=ids).last_hidden_state
        assert (len(last_down), len(first_down)) == (1, 2)
        # the last layer added nothing to the residual stream it was handed; whole forwards do add to it
        assert torch.equal(hidden, model.model.norm(entering[0]))
        assert not torch.allclose(whole, hidden)


def test_the_forwards_come_back_on_exit_another_wrappers_included_even_after_an_error_and_a_new_linear_is_found():
    model = tiny_model("llama")
    last = model.model.layers[-1]
    wrapper = types.MethodType(lambda self, x: torch.nn.Linear.forward(self, x), last.self_attn.o_proj)
    last.self_attn.o_proj.forward = wrapper  # as runtime/native_rows.py installs its own
    with pytest.raises(RuntimeError, match="inside"), keys_and_values_only(model):
        assert last.self_attn.o_proj.forward is not wrapper and "forward" in last.mlp.__dict__
        raise RuntimeError("inside")
    assert last.self_attn.o_proj.forward is wrapper
    assert "forward" not in last.mlp.__dict__ and not in_force(model)
    last.self_attn.o_proj = replaced = torch.nn.Linear(64, 64, bias=False)  # as a quantized load swaps a linear
    with keys_and_values_only(model):
        assert "forward" in replaced.__dict__
    assert "forward" not in replaced.__dict__


def test_the_bench_counts_the_products_a_read_skips():
    model = tiny_model("llama")
    last = model.model.layers[-1]
    skipped = sum(p.numel() for p in [*last.self_attn.o_proj.parameters(), *last.mlp.parameters()])
    assert skipped_parameters(model) == skipped > 0
    decoder = sum(p.numel() for p in model.model.layers.parameters())
    counter = FlopCounter(model)
    with counting(model, counter), torch.no_grad():
        with keys_and_values_only(model):
            model(input_ids=torch.arange(10).unsqueeze(0), use_cache=False, logits_to_keep=1)
        after_chunk = counter.prefill_flops
        model(input_ids=torch.arange(10).unsqueeze(0), use_cache=False, logits_to_keep=1)
    attention, head = 4 * 2 * 4 * 16 * 10 * 5.5, 2 * 64 * 300
    assert after_chunk == pytest.approx(2 * (decoder - skipped) * 10 + attention + head, rel=1e-9)
    assert counter.prefill_flops - after_chunk == pytest.approx(2 * decoder * 10 + attention + head, rel=1e-9)
