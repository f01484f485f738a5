"""`--load-int4`: linear weights in 4 bits with a scale and zero per 32 inputs, a 4-bit grid kept as it was given,
a step's rows by locret's 4-bit kernel or torch's int4 product and a widened weight for a chunk, and the same model
by identity."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.cli import ask
from helpers.documents import DOCUMENT
from helpers.models import save_model_dir, tiny_model
from torch import nn

from locret_cli.core.identity import SAME_MODEL, similarity, weight_samples
from locret_cli.errors import LocretError
from locret_cli.models.loading import load_model
from locret_cli.runtime import int4_linear
from locret_cli.runtime.int4_linear import GROUP, Int4Linear, _quantized_block, four_bit_layers, quantize_groups
from locret_cli.runtime.int8_linear import Int8Embedding, Int8Linear, quantize_linears


def on_grid(out: int, inputs: int, seed: int = 0) -> torch.Tensor:
    """A bf16 weight whose every group of 32 inputs lies on an evenly spaced grid of 16 values (a Q4_K block, as a
    GGUF's dequantized weights are), with its own step and offset per group."""
    torch.manual_seed(seed)
    q = torch.randint(0, 16, (out, inputs)).float()
    step = (torch.rand(out, inputs // GROUP) * 0.015 + 0.005).repeat_interleave(GROUP, 1)
    low = -step * (6 + 3 * torch.rand(out, inputs // GROUP)).repeat_interleave(GROUP, 1)  # values around zero
    return (low + q * step).to(torch.bfloat16)


def widened(packed: torch.Tensor, scales_zeros: torch.Tensor, inputs: int) -> torch.Tensor:
    return Int4Linear(packed, scales_zeros, inputs, None).dequantized().float()


def test_a_weight_on_a_4bit_grid_is_held_as_it_was_given():
    weight = on_grid(128, 96).float()
    dequantized = widened(*quantize_groups(weight), 96)
    groups = weight.reshape(128, -1, GROUP)
    step = ((groups.amax(-1) - groups.amin(-1)) / 15).repeat_interleave(GROUP, 1)
    error = (dequantized - weight).abs()
    assert (error <= step * 0.05 + weight.abs() / 256).all()  # bf16's rounding only, far from a step's half
    assert error.max() < step.min() / 4


def test_any_other_weight_rounds_to_within_half_a_step_of_its_groups_range():
    torch.manual_seed(1)
    weight = torch.randn(64, 64) * torch.tensor([0.01, 1.0, 30.0, 0.0]).repeat(16)[:, None]
    groups = weight.reshape(64, -1, GROUP)
    step = (groups.amax(-1) - groups.amin(-1)) / 15
    error = (widened(*quantize_groups(weight), 64) - weight).abs().reshape(64, -1, GROUP).amax(-1)
    assert (error <= step / 2 + step * 0.05 + 1e-6).all()
    assert error[3::4].max() == 0  # a row of zeros stays zeros


@pytest.mark.parametrize("weight", [on_grid(64, 64, seed=2).float(), torch.randn(64, 64)])
def test_the_c_kernel_and_torchs_ops_quantize_alike(weight):
    if int4_linear.int4_kernels() is None:
        pytest.skip("no C compiler builds native/int4_weights.c here")
    q, step, low, kept = int4_linear.quantized_block(weight.contiguous())
    tq, tstep, tlow, tkept = _quantized_block(weight)
    assert torch.equal(q, tq) and kept == tkept
    assert torch.allclose(step, tstep, rtol=1e-5) and torch.allclose(low, tlow, atol=1e-6)


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_steps_rows_and_a_chunk_compute_the_dequantized_product(kernel, dtype, monkeypatch):
    if kernel and int4_linear.int4_kernels() is None:
        pytest.skip("no C compiler builds native/int4_weights.c here")
    if not kernel:
        monkeypatch.setattr(int4_linear, "int4_kernels", lambda: None)  # torch's ops instead of the C kernel
    torch.manual_seed(0)
    linear = nn.Linear(96, 128, bias=True)
    int4 = Int4Linear.from_linear(linear, dtype)
    chunk = torch.randn(2, 17, 96, dtype=dtype)  # more rows than a question's: the weight widened
    expected = F.linear(chunk.float(), int4.dequantized().float(), int4.bias.float())
    assert int4(chunk).dtype == dtype
    assert torch.allclose(int4(chunk).float(), expected, atol=0.05)
    row = chunk[:1, :1]  # one row goes through the rows' product (tests/test_native_int4_rows.py)
    assert int4(row).shape == (1, 1, 128)
    assert torch.allclose(int4(row).float(), expected[:1, :1], atol=0.05)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_c_kernel_widens_the_dequantized_weight_value_for_value(dtype):
    """bf16 for a chunk computed in bf16, fp32 (the same bf16 values, written wide) for one computed in fp32."""
    if int4_linear.int4_kernels() is None:
        pytest.skip("no C compiler builds native/int4_weights.c here")
    torch.manual_seed(6)
    int4 = Int4Linear.from_linear(nn.Linear(160, 192, bias=False).to(torch.bfloat16))
    widened = int4._widened_t(dtype)
    assert widened.dtype == dtype and torch.equal(widened.t(), int4.dequantized().to(dtype))


def test_sampled_values_are_read_from_the_packing():
    int4 = Int4Linear.from_linear(nn.Linear(96, 128, bias=False))
    index = torch.arange(0, 96 * 128, 37)
    assert torch.allclose(int4.sampled_weight(index), int4.dequantized().float().reshape(-1)[index])


def test_a_model_holds_4bit_linears_where_torch_packs_them_and_stays_the_same_model():
    model = tiny_model("llama")
    with torch.no_grad():  # its linear weights on 4-bit grids, as a Q4_K GGUF's are
        for module in model.modules():
            if type(module) is nn.Linear:
                module.weight.copy_(on_grid(*module.weight.shape, seed=3).float())
    before = weight_samples(model)
    ids = torch.randint(0, 200, (1, 24))
    with torch.no_grad():
        reference = model(ids).logits
        assert quantize_linears(model, 4) == 2 * (4 + 3) + 1
        logits = model(ids).logits
    kinds = {name: type(module) for name, module in model.named_modules()}
    assert kinds["model.layers.0.self_attn.q_proj"] is Int4Linear and kinds["model.layers.1.mlp.down_proj"] is Int4Linear
    assert kinds["model.layers.0.self_attn.k_proj"] is Int8Linear  # 32 outputs: not a block of 64
    assert kinds["lm_head"] is Int8Linear  # 300 outputs
    assert kinds["model.embed_tokens"] is Int8Embedding
    assert similarity(model, before) > 0.999  # the shipped heads' identity, sampled from the packing
    assert F.cosine_similarity(logits.flatten(), reference.flatten(), dim=0) > 0.999
    assert torch.equal(logits.argmax(-1), reference.argmax(-1))


def test_load_int4_from_a_directory_and_the_cli(tmp_path):
    folder = str(save_model_dir(tiny_model("llama"), tmp_path / "llama"))
    loaded = load_model(folder, device="cpu", dtype="fp32", load_int4=True)
    assert any(isinstance(m, Int4Linear) for m in loaded.model.modules())
    assert "int4" in loaded.dtype_reason
    similar = similarity(loaded.model, weight_samples(tiny_model("llama")))
    assert similar > SAME_MODEL
    (tmp_path / "doc.txt").write_text(DOCUMENT)
    result = ask(tmp_path / "doc.txt", "q?", "--model", folder, "--policy", "streaming", "--load-int4",
                 "--max-new-tokens", "3", "--json")
    assert result.exit_code == 0, result.output
    refused = ask(tmp_path / "doc.txt", "q?", "--model", folder, "--load-int4", "--load-8bit")
    assert refused.exit_code == 1 and "choose one of" in refused.output and "Traceback" not in refused.output


def test_where_some_layers_lie_on_4bit_grids_the_others_keep_8_bits():
    def linear(out, inputs, grid):
        module = nn.Linear(inputs, out, bias=False)
        if grid:
            module.weight.data = on_grid(out, inputs, seed=out + inputs).float()
        return module

    file_mix = [linear(128, 64, True), linear(64, 128, False), linear(32, 64, True), linear(64, 64, True)]
    assert four_bit_layers(file_mix) == [True, False, False, True]  # 32 outputs: torch does not pack it
    plain = [linear(128, 64, False), linear(64, 128, False), linear(32, 64, False)]
    assert four_bit_layers(plain) == [True, True, False]  # no grid anywhere: every layer torch packs


def test_torchs_packing_is_read_back_value_for_value():
    torch.manual_seed(4)
    q = torch.randint(0, 16, (192, 128), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
    ones = torch.stack([torch.ones(128 // GROUP, 192), torch.full((128 // GROUP, 192), 8.0)], -1).to(torch.bfloat16)
    int4 = Int4Linear(packed, ones, 128, None)  # (q - 8) × 1 + 8 = q
    assert torch.equal(int4.dequantized().to(torch.int32), q)
    assert torch.equal(int4._widened_t().t().to(torch.int32), q)
    assert torch.equal(int4.sampled_weight(torch.arange(q.numel())).to(torch.int32), q.reshape(-1))


def test_load_int4_hands_back_each_weight_it_quantized_and_keeps_the_files_numbers(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    folder = save_model_dir(tiny_model("llama").to(torch.bfloat16), tmp_path / "llama")
    stored = load_file(folder / "model.safetensors")
    monkeypatch.setattr(int4_linear, "BLOCK_ROWS", 64)  # several blocks, each handed back in turn
    model = load_model(str(folder), device="cpu", dtype="bf16", load_int4=True).model
    monkeypatch.undo()  # the references below in one block each: blocks quantize as the whole weight does
    quantized = [(name, layer) for name, layer in model.named_modules() if isinstance(layer, Int4Linear)]
    assert len(quantized) == 2 * 5
    for name, layer in quantized:
        packed, scales_zeros = quantize_groups(stored[f"{name}.weight"])
        assert torch.equal(layer.packed, packed) and torch.equal(layer.scales_zeros, scales_zeros)


READ_BACK = """
import torch
from torch import nn
from locret_cli.errors import LocretError
from locret_cli.runtime.int4_linear import Int4Linear, packing_block
torch.manual_seed(0)
q = torch.randint(0, 16, (192, 128), dtype=torch.int32)
ones = torch.stack([torch.ones(4, 192), torch.full((4, 192), 8.0)], -1).to(torch.bfloat16)
try:
    int4 = Int4Linear(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2), ones, 128, None)
    read = [torch.equal(int4.dequantized().to(torch.int32), q),
            torch.equal(int4._widened_t().t().to(torch.int32), q),
            torch.equal(int4._widened_t(torch.float32).t().to(torch.int32), q),
            torch.equal(int4.sampled_weight(torch.arange(q.numel())).to(torch.int32), q.reshape(-1))]
    linear = nn.Linear(128, 192, bias=False)
    rows = torch.randn(40, 128)  # 3 rows by the rows' product, 40 (a chunk) by the widened weight, in either dtype
    four = Int4Linear.from_linear(linear)
    weight = four.dequantized().float().t()
    product = all(torch.allclose(four(x.to(d)).float(), x @ weight, atol=0.05)
                  for x in (rows[:3], rows) for d in (torch.float32, torch.bfloat16))
    print(packing_block(), all(read), product)
except LocretError as error:
    print("refused:", error)
"""


@pytest.mark.parametrize("capability", ["avx2", "avx512"])
def test_torchs_packing_is_read_back_on_each_kind_of_cpu(capability):
    """torch packs 4-bit weights in blocks of 64 output rows where its kernels use AVX-512 and of 32 where they use
    AVX2 (`ATEN_CPU_CAPABILITY` picks which, up to what the CPU has): both read back value for value, and a chunk's
    product and a row's compute the dequantized weight's."""
    if capability == "avx512" and "avx512bw" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no AVX-512: torch packs for AVX2 whatever is asked")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    done = subprocess.run([sys.executable, "-c", READ_BACK], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [{"avx2": "32", "avx512": "64"}[capability], "True", "True"]


def test_a_packing_locret_cannot_read_is_refused_in_one_line():
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}  # torch's kernels without SIMD pack another way
    done = subprocess.run([sys.executable, "-c", READ_BACK], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("refused: torch's 4-bit packing on this CPU is not one locret reads: load without "
                                   "--load-int4")


def test_the_cli_refuses_a_packing_it_cannot_read_in_one_line(tmp_path, monkeypatch):
    def unreadable():
        raise LocretError("torch's 4-bit packing on this CPU is not one locret reads: load without --load-int4")

    monkeypatch.setattr(int4_linear, "packing_block", unreadable)
    folder = str(save_model_dir(tiny_model("llama"), tmp_path / "llama"))
    (tmp_path / "doc.txt").write_text(DOCUMENT)
    refused = ask(tmp_path / "doc.txt", "q?", "--model", folder, "--policy", "streaming", "--load-int4")
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "not one locret reads: load without --load-int4" in refused.output
