"""A few bf16 rows times bf16 weights in place, by locret's kernel (`runtime/native_rows.py`): the product torch
computes, to within the order of the sums, rounded to bf16 as torch rounds; a model's one-row products go to it
with no copy of any weight, and chunks and training keep torch's product."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.engines import greedy_answer
from helpers.models import tiny_model
from helpers.rounding import within_rounding

from locret_cli.core.families import FAMILIES
from locret_cli.core.heads import RetainingHeads
from locret_cli.runtime import native_rows
from locret_cli.runtime.packed_linear import packable

needs_kernel = pytest.mark.skipif(native_rows.kernels() is None,
                                  reason="the rows kernel needs AVX2, FMA and a C compiler")
FAMILY_NAMES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "phi3": "phi3",
                "gemma3_text": "gemma3"}


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("width", [64, 67, 80, 1536])  # whole blocks, a tail of 3, of 16, a model's width
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [40, 43])  # outputs in four quarters, and three more
def test_bf16_rows_are_the_product_rounded_once_to_bf16(rows, width, bias, out):
    generator = torch.Generator().manual_seed(width + rows)
    weight = torch.randn(out, width, generator=generator).bfloat16()
    b = torch.randn(out, generator=generator).bfloat16() if bias else None
    x = torch.randn(rows, width, generator=generator).bfloat16()
    got = native_rows.rows_product(x, weight, b)
    exact = F.linear(x.double(), weight.double(), None if b is None else b.double())
    bound = (width + 1) * 2.0 ** -24 * (x.double().abs() @ weight.double().abs().T + (0 if b is None else
                                                                                       b.double().abs()))
    assert got.dtype == torch.bfloat16 and got.shape == (rows, out) and within_rounding(got, exact, bound)


@needs_kernel
@pytest.mark.parametrize("total", [1 + 2 ** -8, 1 + 2 ** -7 + 2 ** -8, -(1 + 2 ** -8), 3 * 2 ** -9])
def test_a_sum_halfway_between_two_bf16_numbers_rounds_to_even_as_torch_does(total):
    high = math.copysign(1.0, total) if abs(total) >= 1 else 0.0
    x = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
    weight = torch.tensor([[high, total - high]], dtype=torch.bfloat16)
    assert weight.double().sum().item() == total  # both parts are bf16 numbers, so the fp32 sum is exact
    assert native_rows.rows_product(x, weight, None).item() == torch.tensor(total).bfloat16().item()


@needs_kernel
def test_a_nan_stays_a_nan():
    x = torch.tensor([[1.0, float("nan")]], dtype=torch.bfloat16)
    assert native_rows.rows_product(x, torch.ones(3, 2, dtype=torch.bfloat16), None).isnan().all()


def test_chunks_other_dtypes_and_mismatched_biases_are_left_to_torch():
    weight = torch.ones(8, 16, dtype=torch.bfloat16)
    assert native_rows.rows_product(torch.ones(native_rows.ROWS + 1, 16, dtype=torch.bfloat16), weight, None) is None
    assert native_rows.rows_product(torch.ones(1, 16, dtype=torch.bfloat16), weight.float(), None) is None
    assert native_rows.rows_product(torch.ones(1, 16, dtype=torch.float16), weight, None) is None
    assert native_rows.rows_product(torch.ones(1, 16, dtype=torch.bfloat16), weight, torch.ones(8)) is None


def answer(model) -> tuple[list[int], torch.Tensor, list[torch.Tensor]]:
    """The greedy tokens, the question's logits, and the final norm's output for every input of more than `ROWS`
    rows (the read's chunks and the question): what torch's product computes, before the logits' one-row product."""
    chunks = []

    def keep(module, inputs, output):
        if output.shape[-2] > native_rows.ROWS:
            chunks.append(output.detach().clone())

    hook = model.model.norm.register_forward_hook(keep)
    try:
        torch.manual_seed(0)
        tokens, logits = greedy_answer(model, RetainingHeads.for_model(model))
    finally:
        hook.remove()
    return tokens, logits, chunks


@needs_kernel
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_bf16_model_decodes_the_same_tokens_with_its_weights_in_place(family):
    model = tiny_model(FAMILY_NAMES[family]).to(torch.bfloat16)
    before_tokens, before_logits, before_chunks = answer(model)
    weights = {id(m.weight): m.weight.numel() * 2 for m in model.modules() if type(m) is torch.nn.Linear}
    pointers = {name: p.data_ptr() for name, p in model.named_parameters()}
    assert native_rows.take_rows(model) == sum(weights.values())
    assert native_rows.take_rows(model) == 0  # each linear is taken once
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == pointers  # no weight copied or moved
    assert not any(packable(m) for m in model.modules())  # so nothing is packed beside them either
    after_tokens, after_logits, after_chunks = answer(model)
    assert len(after_chunks) == len(before_chunks) == 160 // 32 + 1  # five chunks read, then the question
    # the chunks and the question's prefill keep torch's product, bit for bit (the logits' one row may round apart)
    assert all(torch.equal(a, b) for a, b in zip(after_chunks, before_chunks))
    assert torch.allclose(after_logits, before_logits, rtol=2 ** -6, atol=0)  # within a bf16 rounding of each logit
    assert after_tokens == before_tokens


@needs_kernel
def test_one_row_goes_to_the_kernel_and_chunks_and_gradients_to_torch(monkeypatch):
    model = tiny_model("qwen2").to(torch.bfloat16)
    native_rows.take_rows(model)
    calls = []  # the inputs the kernel multiplied

    def recorded(x, weight, bias, real=native_rows.rows_product):
        out = real(x, weight, bias)
        calls.extend([] if out is None else [x.shape])
        return out

    monkeypatch.setattr(native_rows, "rows_product", recorded)
    layer = model.model.layers[0].self_attn.q_proj  # with a bias
    with torch.no_grad():
        one = layer(torch.randn(1, 1, layer.in_features, dtype=torch.bfloat16))
        chunk = torch.randn(1, 9, layer.in_features, dtype=torch.bfloat16)
        assert torch.equal(layer(chunk), F.linear(chunk, layer.weight, layer.bias))
    assert one.shape == (1, 1, layer.out_features) and calls == [(1, 1, layer.in_features)]
    x = torch.randn(1, 1, layer.in_features, dtype=torch.bfloat16, requires_grad=True)
    layer(x).sum().backward()
    assert x.grad is not None and len(calls) == 1


def test_without_the_kernel_nothing_is_taken(monkeypatch):
    monkeypatch.setenv("LOCRET_NATIVE_ROWS", "0")
    native_rows.kernels.cache_clear()
    try:
        model = tiny_model("llama").to(torch.bfloat16)
        assert native_rows.take_rows(model) == 0 and not any("forward" in vars(m) for m in model.modules())
    finally:
        native_rows.kernels.cache_clear()
