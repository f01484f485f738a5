"""Speed-ups that must not change a result: packed bf16 linears, and the dtype probe's choice and cache."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.engines import greedy_answer
from helpers.models import tiny_model

from locret_cli.core.heads import RetainingHeads
from locret_cli.runtime import dtype_probe, packed_linear
from locret_cli.runtime.packed_linear import PACKED_ATTRIBUTE, pack_if_room, pack_linears, packable

needs_onednn = pytest.mark.skipif(not packable(torch.nn.Linear(2, 2).to(torch.bfloat16)),
                                  reason="this torch build has no oneDNN packed linear")


@needs_onednn
def test_packed_linears_give_the_same_logits_and_greedy_tokens():
    model = tiny_model("qwen2").to(torch.bfloat16)  # q/k/v biases go through the packed product too
    heads = RetainingHeads.for_model(model)
    before_tokens, before_logits = greedy_answer(model, heads)
    assert pack_linears(model) == 2 * 7 + 1  # every projection of both layers, and the LM head
    assert pack_linears(model) == 0  # idempotent
    after_tokens, after_logits = greedy_answer(model, heads)
    assert after_tokens == before_tokens and torch.equal(after_logits, before_logits)


@needs_onednn
def test_siblings_share_one_packed_product_with_the_same_outputs():
    model = tiny_model("qwen2").to(torch.bfloat16)  # q/k/v with biases, gate/up without
    pack_linears(model)
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    qkv = {getattr(attention, n).locret_packed_weight[0] for n in ("q_proj", "k_proj", "v_proj")}
    gate_up = {getattr(mlp, n).locret_packed_weight[0] for n in ("gate_proj", "up_proj")}
    assert len(qkv) == 1 and len(gate_up) == 1 and qkv != gate_up
    assert packed_linear.packed_bytes(model) == 2 * sum(m.weight.numel() for m in model.modules()
                                                        if isinstance(m, torch.nn.Linear))
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    x = torch.randn(1, 1, model.config.hidden_size, dtype=torch.bfloat16)
    torch.ops.mkldnn._linear_pointwise = lambda *a: calls.append(a[0]) or real(*a)
    try:
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj"):
                module = getattr(attention, name)
                assert torch.equal(module(x), torch.nn.functional.linear(x, module.weight, module.bias)), name
            y = x + 1  # a new input: the product runs again
            assert torch.equal(attention.k_proj(y), torch.nn.functional.linear(y, attention.k_proj.weight,
                                                                                attention.k_proj.bias))
            x.mul_(2)  # the same tensor changed in place: again
            assert torch.equal(attention.q_proj(x), torch.nn.functional.linear(x, attention.q_proj.weight,
                                                                                attention.q_proj.bias))
    finally:
        torch.ops.mkldnn._linear_pointwise = real
    assert len(calls) == 3


@needs_onednn
def test_only_one_row_goes_through_the_packed_product():
    """Chunks keep F.linear, whose rounding the packed product does not always match; one row is the same."""
    layer = torch.nn.Linear(576, 576, bias=False).to(torch.bfloat16)
    pack_linears(layer)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    with torch.no_grad():
        for rows in (1, 64):
            x = torch.randn(1, rows, 576, dtype=torch.bfloat16)
            torch.ops.mkldnn._linear_pointwise = lambda *a: calls.append(rows) or real(*a)
            try:
                assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight))
            finally:
                torch.ops.mkldnn._linear_pointwise = real
    assert calls == [1]


@needs_onednn
def test_packed_linears_still_train_through_the_plain_product():
    model = tiny_model("llama").to(torch.bfloat16)
    pack_linears(model)
    model.model.layers[0].self_attn.q_proj.weight.requires_grad_(True)
    loss = model(input_ids=torch.tensor([[2, 3, 4, 5]]), labels=torch.tensor([[2, 3, 4, 5]])).loss
    loss.backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_a_cpu_that_cannot_pack_bf16_packs_nothing_and_still_probes(monkeypatch, tmp_path):
    """oneDNN refuses bf16 packing without AVX-512 or AVX-NE-CONVERT (an AVX2-only AMD EPYC): locret must run."""
    def refuse(weight):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw")

    monkeypatch.setattr(packed_linear, "_reorder", refuse)
    packed_linear.packing_works.cache_clear()
    try:
        model = tiny_model("llama").to(torch.bfloat16)
        assert not packed_linear.packing_works() and pack_linears(model) == 0 and pack_if_room(model) == 0
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        choice = dtype_probe.measured_cpu_dtype()
        timed = json.loads((tmp_path / "locret" / "dtype-probe.json").read_text())[dtype_probe.machine_key()]
        assert set(timed) == {"bf16", "fp32"} and min(timed.values()) > 0  # both dtypes ran the probe
        assert choice.dtype == (torch.bfloat16 if timed["bf16"] < timed["fp32"] else torch.float32)
    finally:
        packed_linear.packing_works.cache_clear()


def test_fp32_and_quantized_layers_are_never_packed():
    model = tiny_model("llama")
    assert pack_linears(model) == 0
    assert not any(hasattr(m, PACKED_ATTRIBUTE) for m in model.modules())


@needs_onednn
def test_packing_waits_for_room(monkeypatch):
    model = tiny_model("llama").to(torch.bfloat16)
    monkeypatch.setattr("locret_cli.core.measure.available_memory", lambda device: 1000)
    assert pack_if_room(model) == 0 and not hasattr(model.lm_head, PACKED_ATTRIBUTE)
    monkeypatch.setattr("locret_cli.core.measure.available_memory", lambda device: 2**40)
    weights = sum(m.weight.numel() * 2 for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert pack_if_room(model) == weights


def test_the_dtype_probe_keeps_the_faster_and_measures_once(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    timings = {torch.bfloat16: 0.5, torch.float32: 1.5}
    calls = []
    monkeypatch.setattr(dtype_probe, "probe_seconds", lambda dtype: calls.append(dtype) or timings[dtype])
    first = dtype_probe.measured_cpu_dtype()
    assert first.dtype == torch.bfloat16 and first.reason == "bf16: 3.0x faster than fp32 in this CPU's probe"
    assert dtype_probe.measured_cpu_dtype() == first and len(calls) == 2 * dtype_probe.TURNS  # then the cache
    cached = json.loads((tmp_path / "locret" / "dtype-probe.json").read_text())
    assert cached == {dtype_probe.machine_key(): {"bf16": 0.5, "fp32": 1.5}}


def test_the_dtype_probe_takes_turns_on_one_thread_and_keeps_each_dtypes_best(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    slowed = iter([2.4, 0.5, 0.2, 0.6, 0.21, 0.55])  # bf16, fp32, ...: another process slowed bf16's first turn
    threads = []
    monkeypatch.setattr(dtype_probe, "probe_seconds", lambda dtype: threads.append(torch.get_num_threads()) or
                        next(slowed))
    before = torch.get_num_threads()
    choice = dtype_probe.measured_cpu_dtype()
    assert choice.dtype == torch.bfloat16 and choice.reason == "bf16: 2.5x faster than fp32 in this CPU's probe"
    assert threads == [1] * 6 and torch.get_num_threads() == before
    cached = json.loads((tmp_path / "locret" / "dtype-probe.json").read_text())
    assert cached[dtype_probe.machine_key()] == {"bf16": 0.2, "fp32": 0.5}


def test_the_dtype_probe_picks_fp32_where_bf16_is_slow_and_survives_a_bad_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "locret").mkdir()
    (tmp_path / "locret" / "dtype-probe.json").write_text("{not json")
    monkeypatch.setattr(dtype_probe, "probe_seconds", lambda dtype: 2.0 if dtype == torch.bfloat16 else 0.5)
    choice = dtype_probe.measured_cpu_dtype()
    assert choice.dtype == torch.float32 and choice.reason.startswith("fp32: 4.0x faster than bf16")


def test_the_probe_block_runs_every_round_in_the_dtype_asked(monkeypatch):
    seen = []
    real = dtype_probe.ProbeBlock.forward
    monkeypatch.setattr(dtype_probe.ProbeBlock, "forward", lambda self, x: seen.append(x.dtype) or real(self, x))
    for dtype in (torch.float32, torch.bfloat16):
        seen.clear()
        dtype_probe.probe_seconds(dtype)
        assert seen == [dtype] * (len(dtype_probe.ROUNDS) + sum(dtype_probe.ROUNDS.values()))
