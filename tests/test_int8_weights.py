"""`--load-8bit`: int8 linear weights with a scale per row, from any source, and the same model by identity."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.cli import ask
from helpers.documents import DOCUMENT
from helpers.models import save_model_dir, tiny_model
from torch import nn

from locret_cli.api import ModelSpec, load_session
from locret_cli.core.identity import SAME_MODEL, similarity, weight_samples
from locret_cli.errors import SettingError
from locret_cli.models.loading import load_model
from locret_cli.runtime.int8_linear import Int8Embedding, Int8Linear, quantize_linears, quantize_rows


def test_rows_round_to_within_half_a_step_and_zero_rows_stay_zero():
    torch.manual_seed(0)
    weight = torch.randn(6, 40) * torch.tensor([0.01, 1.0, 30.0, 0.5, 2.0, 0.0])[:, None]
    q, scale = quantize_rows(weight)
    assert q.dtype == torch.int8 and scale.shape == (6,)
    assert q.abs().amax(dim=1)[:5].tolist() == [127] * 5  # each row's largest value uses the whole range
    error = (q.float() * scale[:, None] - weight).abs()
    assert (error <= scale[:, None] / 2 + 1e-6).all()
    assert q[5].abs().sum() == 0 and torch.isfinite(scale).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_row_and_a_chunk_compute_the_dequantized_product(dtype):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=True).to(dtype)
    int8 = Int8Linear.from_linear(linear)
    chunk = torch.randn(2, 5, 64, dtype=dtype)
    expected = F.linear(chunk.float(), int8.dequantized().float(), int8.bias.float())
    tolerance = 1e-4 if dtype == torch.float32 else 0.05
    assert torch.allclose(int8(chunk).float(), expected, atol=tolerance)
    row = chunk[:1, :1]  # one row goes through torch's int8 kernel
    assert int8(row).shape == (1, 1, 48)
    assert torch.allclose(int8(row).float(), expected[:1, :1], atol=tolerance)


@pytest.mark.parametrize("tied", [True, False])
def test_a_model_quantizes_its_embeddings_too_and_stays_the_same_model(tied):
    model = tiny_model("llama")
    if tied:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.model.embed_tokens.weight
    table = model.model.embed_tokens.weight.detach().clone()
    before = weight_samples(model)
    ids = torch.randint(0, 200, (1, 24))
    with torch.no_grad():
        reference = model(ids).logits
        linears = sum(type(m) is nn.Linear for m in model.modules())
        assert quantize_linears(model) == linears
        logits = model(ids).logits
    assert not any(type(m) in (nn.Linear, nn.Embedding) for m in model.modules())
    embeddings = model.model.embed_tokens
    assert isinstance(model.lm_head, Int8Linear) and isinstance(embeddings, Int8Embedding)
    assert embeddings.weight.dtype == torch.int8 and embeddings(ids).dtype == torch.float32
    shares = embeddings.weight is model.lm_head.weight and embeddings.weight_scale is model.lm_head.weight_scale
    assert shares == tied  # a tied output layer and the embeddings hold one int8 table
    q, scale = quantize_rows(table)
    assert torch.equal(embeddings(ids), (q[ids].float() * scale[ids][..., None]))  # the rows, dequantized
    assert not model.config.tie_word_embeddings
    assert similarity(model, before) > SAME_MODEL  # shipped heads still find the model
    assert F.cosine_similarity(logits.flatten(), reference.flatten(), dim=0) > 0.999


def test_a_lookup_returns_the_scaled_rows_in_the_scales_dtype():
    weight = torch.tensor([[127, -64], [1, 0], [-127, 127]], dtype=torch.int8)
    embeddings = Int8Embedding(weight, torch.tensor([0.5, 2.0, 0.25], dtype=torch.bfloat16))
    looked_up = embeddings(torch.tensor([[2, 0, 2]]))
    assert looked_up.dtype == torch.bfloat16 and looked_up.shape == (1, 3, 2)
    assert looked_up.float().tolist() == [[[-31.75, 31.75], [63.5, -32.0], [-31.75, 31.75]]]


def test_load_8bit_from_a_directory_and_refusals(tmp_path, llama_dir):
    loaded = load_model(llama_dir, device="cpu", dtype="fp32", load_8bit=True)
    assert any(isinstance(m, Int8Linear) for m in loaded.model.modules())
    assert "int8" in loaded.dtype_reason
    with pytest.raises(SettingError, match="choose one of"):
        load_session(ModelSpec(llama_dir, device="cpu", load_4bit=True, load_8bit=True))


def test_the_cli_answers_with_8bit_weights_and_refuses_them_for_the_embedded_model(doc, llama_dir):
    result = ask(doc, "q?", "--model", llama_dir, "--policy", "streaming", "--load-8bit", "--max-new-tokens", "3",
                 "--json")
    assert result.exit_code == 0, result.output
    refused = ask(doc, "q?", "--load-8bit")
    assert refused.exit_code == 1 and "--load-8bit, --load-int4 and --max-memory apply to --model" in refused.output
    assert "Traceback" not in refused.output


@pytest.fixture
def llama_dir(tmp_path):
    return str(save_model_dir(tiny_model("llama"), tmp_path / "llama"))


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    return path
