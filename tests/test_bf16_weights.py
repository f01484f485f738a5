"""bf16 weights computing in fp32 (`runtime/bf16_weights.py`): a bf16 checkpoint loaded for fp32 arithmetic keeps its
linear and embedding weights bf16 and computes what the fp32 model computes: chunks bit for bit, one row by the
native kernel to within fp32 rounding (bit for bit without it), the same greedy answers and the same identity."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.engines import chunks_of, random_ids
from helpers.models import save_model_dir, tiny_model
from transformers import AutoModelForCausalLM

from locret_cli.core.engine import Engine
from locret_cli.core.families import FAMILIES
from locret_cli.core.heads import compute_dtype
from locret_cli.core.policies.full import FullPolicy
from locret_cli.models.fingerprint import model_identity
from locret_cli.models.loading import load_model
from locret_cli.runtime import bf16_weights, native_rows
from locret_cli.runtime.packed_linear import packable
from locret_cli.settings import AnswerSettings, ReadSettings

FAMILY_NAMES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "phi3": "phi3",
                "gemma3_text": "gemma3"}  # the registry's model types -> the tiny models' names
needs_kernel = pytest.mark.skipif(native_rows.kernels() is None,
                                  reason="the rows kernel needs AVX2, FMA and a C compiler")


@pytest.fixture(scope="module", params=sorted(FAMILIES), ids=str)
def pair(request, tmp_path_factory) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the fp32 model, the same bf16 checkpoint loaded by locret for fp32 arithmetic)."""
    folder = tmp_path_factory.mktemp(request.param)
    save_model_dir(tiny_model(FAMILY_NAMES[request.param]).to(torch.bfloat16), folder)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    loaded = load_model(str(folder), device="cpu", dtype="fp32")
    assert loaded.dtype_reason == "fp32: asked for; weights kept bf16 as stored"
    return reference, loaded.model


@pytest.fixture
def kernel_off(monkeypatch):
    monkeypatch.setenv("LOCRET_NATIVE_ROWS", "0")
    native_rows.kernels.cache_clear()
    yield
    native_rows.kernels.cache_clear()


def test_plain_linear_and_embedding_weights_stay_bf16_and_the_rest_is_fp32(pair):
    _, model = pair
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            plain = type(module) in (torch.nn.Linear, torch.nn.Embedding) and name == "weight"
            assert param.dtype == (torch.bfloat16 if plain and "forward" in vars(module) else torch.float32), name
    assert compute_dtype(model) == torch.float32
    assert not any(packable(m) for m in model.modules())  # oneDNN packing leaves these linears alone
    assert bf16_weights.keeps_bf16_weights(model)


def test_a_chunk_computes_the_fp32_models_numbers_bit_for_bit(pair):
    reference, model = pair
    ids = torch.tensor([random_ids(40)])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)


def test_one_row_computes_them_to_within_fp32_rounding_and_bit_for_bit_without_the_kernel(pair, kernel_off):
    reference, model = pair
    ids = torch.tensor([random_ids(1)])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, reference(ids).logits)  # the step widens the weights instead


@needs_kernel
def test_one_row_by_the_kernel_is_within_fp32_rounding(pair):
    reference, model = pair
    ids = torch.tensor([random_ids(1)])
    with torch.no_grad():
        got, expected = model(ids).logits, reference(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_questions_rows_go_to_the_kernel_within_fp32_rounding(pair, monkeypatch):
    """Up to `QUESTION_ROWS` rows (a question prefilled after a read) are the kernel's, which widening every weight
    for them would take longer than; one row more is a chunk, widened (bit for bit)."""
    reference, model = pair
    calls = []  # the row counts the kernel multiplied
    monkeypatch.setattr(native_rows, "_run", lambda function, x, *rest, real=native_rows._run:
                        calls.append(x.numel() // x.shape[-1]) or real(function, x, *rest))
    most = native_rows.QUESTION_ROWS
    ids = torch.tensor([random_ids(most + 1)])
    with torch.no_grad():
        torch.testing.assert_close(model(ids[:, :most]).logits, reference(ids[:, :most]).logits, rtol=1e-5,
                                   atol=1e-5)
        taken = len(calls)
        assert torch.equal(model(ids).logits, reference(ids).logits)
    assert taken > 0 and set(calls) == {most} and len(calls) == taken


def test_the_engine_reads_and_answers_as_the_fp32_model_does(pair):
    reference, model = pair
    settings, document, question = ReadSettings(policy="full", chunk_size=16), random_ids(48), random_ids(6, seed=2)
    answers = []
    for m in (reference, model):
        engine = Engine(m, FullPolicy(), settings, answering=AnswerSettings(max_new_tokens=8))
        engine.read(chunks_of(document, settings.chunk_size))
        answers.append(engine.answer(question).token_ids)
    assert answers[0] == answers[1] and len(answers[0]) == 8


def test_the_model_keeps_the_identity_of_its_fp32_self(pair):
    reference, model = pair
    assert model_identity(model) == model_identity(reference)


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("width", [64, 67, 80, 1536])  # whole blocks, a tail of 3, of 16, a model's width
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out", [40, 43])  # outputs in four quarters, and three more
def test_the_kernel_computes_the_fp32_product_of_a_few_rows(rows, width, bias, out):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(out, width, generator=generator).bfloat16()
    b = torch.randn(out, generator=generator) if bias else None
    x = torch.randn(rows, width, generator=generator)
    got = native_rows.rows_product(x, weight, b).double()
    exact = F.linear(x.double(), weight.double(), None if b is None else b.double())
    bound = (width + 1) * 2.0 ** -24 * (x.double().abs() @ weight.double().abs().T + (0 if b is None else b.abs()))
    assert got.shape == (rows, out) and bool(((got - exact).abs() <= bound).all())  # fp32 summation's error bound


def test_the_kernel_leaves_chunks_and_other_weights_to_torch():
    weight = torch.ones(8, 16, dtype=torch.bfloat16)
    assert native_rows.rows_product(torch.ones(native_rows.ROWS + 1, 16), weight, None) is None
    assert native_rows.rows_product(torch.ones(1, 16), weight.float(), None) is None


def test_a_checkpoint_stored_in_fp32_loads_in_fp32(tmp_path):
    save_model_dir(tiny_model("llama"), tmp_path)
    loaded = load_model(str(tmp_path), device="cpu", dtype="fp32")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    assert not bf16_weights.keeps_bf16_weights(loaded.model) and loaded.dtype_reason == "fp32: asked for"


def test_bf16_arithmetic_loads_bf16_as_before(tmp_path):
    save_model_dir(tiny_model("llama").to(torch.bfloat16), tmp_path)
    loaded = load_model(str(tmp_path), device="cpu", dtype="bf16")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    assert compute_dtype(loaded.model) == torch.bfloat16
