"""A few rows times int8 weights in place, by locret's kernel (`native/rows_int8w.c`): the product with the
dequantized weights to within the order of fp32 sums (in bf16, rounded once as torch rounds); `--load-8bit` models
decode through it, chunks dequantize into one reused buffer, and a bf16 checkpoint computing in fp32 quantizes from
its bf16 weights."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.engines import greedy_answer
from helpers.models import save_model_dir, tiny_model
from helpers.rounding import within_rounding
from torch import nn

from locret_cli.core.families import FAMILIES
from locret_cli.core.heads import RetainingHeads, compute_dtype
from locret_cli.models.loading import load_model
from locret_cli.runtime import bf16_weights, native_rows
from locret_cli.runtime.int8_linear import Int8Embedding, Int8Linear, quantize_linears

needs_kernel = pytest.mark.skipif(native_rows.int8_kernels() is None,
                                  reason="the int8 rows kernel needs AVX2, FMA and a C compiler")
FAMILY_NAMES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "phi3": "phi3",
                "gemma3_text": "gemma3"}


def quantized(out: int, width: int, dtype: torch.dtype, bias: bool, seed: int) -> Int8Linear:
    torch.manual_seed(seed)
    return Int8Linear.from_linear(nn.Linear(width, out, bias=bias).to(dtype))


def exact_product(layer: Int8Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the dequantized product in float64, the bound on fp32 summation error for `width` terms)."""
    weight = layer.weight.double() * layer.weight_scale.double()[:, None]
    bias = None if layer.bias is None else layer.bias.double()
    exact = F.linear(x.double(), weight, bias)
    magnitude = x.double().abs() @ weight.abs().T + (0 if bias is None else bias.abs())
    return exact, (x.shape[-1] + 2) * 2.0 ** -24 * magnitude


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("width", [64, 67, 80, 1536])  # whole blocks, a tail of 3, of 16, a model's width
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [40, 43])  # outputs in four quarters, and three more
def test_fp32_rows_are_the_dequantized_product_to_within_fp32_rounding(rows, width, bias, out):
    layer = quantized(out, width, torch.float32, bias, width + rows)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows))
    got = native_rows.int8_rows_product(x, layer.weight, layer.weight_scale, layer.bias)
    exact, bound = exact_product(layer, x)
    assert got.dtype == torch.float32 and got.shape == (rows, out)
    assert bool(((got.double() - exact).abs() <= bound).all())


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("width", [64, 67, 80, 1536])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [40, 43])
def test_bf16_rows_are_the_dequantized_product_rounded_once_to_bf16(rows, width, bias, out):
    layer = quantized(out, width, torch.bfloat16, bias, width + rows)
    x = torch.randn(rows, width, generator=torch.Generator().manual_seed(rows)).bfloat16()
    got = native_rows.int8_rows_product(x, layer.weight, layer.weight_scale, layer.bias)
    exact, bound = exact_product(layer, x)
    assert got.dtype == torch.bfloat16 and within_rounding(got, exact, bound)


def test_chunks_and_mismatched_tensors_are_left_to_torch():
    q, scale = torch.ones(8, 16, dtype=torch.int8), torch.ones(8)
    product = native_rows.int8_rows_product
    assert product(torch.ones(native_rows.ROWS + 1, 16), q, scale, None) is None
    assert product(torch.ones(1, 16), q.float(), scale, None) is None  # not int8 weights
    assert product(torch.ones(1, 16), q, scale.bfloat16(), None) is None  # the scale in another dtype
    assert product(torch.ones(1, 16), q, scale, torch.ones(8).bfloat16()) is None
    assert product(torch.ones(1, 16, dtype=torch.float16), q, scale.half(), None) is None


@needs_kernel
def test_a_layer_sends_a_questions_rows_to_the_kernel_and_a_chunk_to_the_dequantized_product(monkeypatch):
    """Up to `QUESTION_ROWS` rows (one decode row, a question's) go to the kernel: dequantizing every weight for them
    costs more. A chunk of more rows is the dequantized weight's product, bit for bit."""
    layer = quantized(48, 64, torch.float32, True, 0)
    calls = []  # the inputs the kernel multiplied
    monkeypatch.setattr("locret_cli.runtime.int8_linear.int8_rows_product",
                        lambda x, *rest, real=native_rows.int8_rows_product, **most: calls.append(x.shape)
                        or real(x, *rest, **most))
    with torch.no_grad():
        most = native_rows.QUESTION_ROWS
        row, chunk = torch.randn(1, 1, 64), torch.randn(1, most + 1, 64)
        for rows in (row, chunk[:, :3], chunk[:, :most]):
            exact, bound = exact_product(layer, rows)
            assert bool(((layer(rows).double() - exact).abs() <= bound).all())
        assert torch.equal(layer(chunk), F.linear(chunk, layer.dequantized(), layer.bias))  # bit for bit
    assert calls == [(1, 1, 64), (1, 3, 64), (1, most, 64), (1, most + 1, 64)]  # the last declined
    half = quantized(48, 64, torch.bfloat16, True, 0)  # bf16 rows: only a step's go to the kernel
    with torch.no_grad():
        rows = chunk[:, :9].bfloat16()
        assert torch.equal(half(rows), F.linear(rows, half.dequantized(), half.bias))


@needs_kernel
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_int8_model_decodes_as_it_does_without_the_kernel(family, dtype, monkeypatch):
    model = tiny_model(FAMILY_NAMES[family]).to(dtype)
    quantize_linears(model)
    heads = RetainingHeads.for_model(model)
    torch.manual_seed(0)
    with_kernel = greedy_answer(model, heads)
    monkeypatch.setenv("LOCRET_NATIVE_ROWS", "0")
    native_rows.int8_kernels.cache_clear()
    try:
        torch.manual_seed(0)
        without = greedy_answer(model, heads)  # one row by torch's _weight_int8pack_mm
    finally:
        native_rows.int8_kernels.cache_clear()
    # the products of a few rows differ by the order of fp32 sums, and in bf16 also by a rounding (torch rounds the
    # product, then its sum with the bias): a random bf16 model's near-ties part within a few steps
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(with_kernel[1], without[1], rtol=tolerance, atol=tolerance)
    if dtype == torch.float32:
        assert with_kernel[0] == without[0]


def test_a_bf16_checkpoint_computing_in_fp32_quantizes_from_its_bf16_weights(tmp_path):
    folder = save_model_dir(tiny_model("qwen2").to(torch.bfloat16), tmp_path / "qwen2")
    reference = load_model(str(folder), device="cpu", dtype="fp32")  # bf16 weights kept, computing in fp32
    loaded = load_model(str(folder), device="cpu", dtype="fp32", load_8bit=True)
    model = loaded.model
    assert loaded.dtype_reason == "fp32: asked for; weights quantized from bf16; linear weights in int8"
    assert compute_dtype(model) == torch.float32 and bf16_weights.keeps_bf16_weights(reference.model)
    assert not any(type(m) in (nn.Linear, nn.Embedding) for m in model.modules())
    layers = [m for m in model.modules() if isinstance(m, Int8Linear | Int8Embedding)]
    assert {m.weight_scale.dtype for m in layers} == {torch.float32}
    assert {m.bias.dtype for m in layers if getattr(m, "bias", None) is not None} == {torch.float32}
    assert isinstance(model.model.embed_tokens, Int8Embedding)
    references = dict(reference.model.named_modules())
    for name, layer in model.named_modules():
        if isinstance(layer, Int8Linear | Int8Embedding):  # quantized from the very bf16 numbers the checkpoint holds
            weight = references[name].weight.float()
            assert torch.equal(layer.weight, torch.round(weight / layer.weight_scale[:, None]).clamp(-127, 127)
                               .to(torch.int8))
    ids = torch.randint(2, 200, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, expected = model(ids).logits, reference.model(ids).logits
    assert got.dtype == torch.float32
    assert F.cosine_similarity(got.flatten(), expected.flatten(), dim=0) > 0.999
