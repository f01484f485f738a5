"""A few rows times 4-bit weights in torch's packing, by locret's kernel (`native/rows_int4w.c`): the product with the
dequantized weights to within the rows' 16-bit rounding per group of 32 inputs and fp32 sums (in bf16, rounded once
more); `--load-int4` layers decode through it, in eager and compiled steps, and fall back to torch's product."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.runtime import int4_linear, native_rows
from locret_cli.runtime.int4_linear import GROUP, Int4Linear, packing_block


def layer(out: int, width: int, bias: bool = False, seed: int = 0) -> Int4Linear:
    torch.manual_seed(seed)
    return Int4Linear.from_linear(nn.Linear(width, out, bias=bias).to(torch.bfloat16))


def kernel_runs() -> bool:
    if native_rows.int4_kernels(packing_block()) is None:
        return False
    probe = layer(64, 32)
    product = native_rows.int4_rows_product(torch.zeros(1, 32), probe.packed, probe.scales_zeros, packing_block())
    return product is not None


needs_kernel = pytest.mark.skipif(not kernel_runs(), reason="the 4-bit rows kernel needs AVX2 and FMA (AVX-512 BW, "
                                                            "VBMI and VNNI where torch packs blocks of 64) and a C "
                                                            "compiler")


def rows(count: int, width: int, seed: int) -> torch.Tensor:
    """Rows with a few inputs 50 times the others, as a model's activations have."""
    generator = torch.Generator().manual_seed(seed)
    outliers = (torch.rand(count, width, generator=generator) < 0.03) * 49 + 1
    return torch.randn(count, width, generator=generator) * outliers


def exact_and_bound(int4: Int4Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the product with the dequantized weights, exact in float64, and what the kernel may differ from it by): each
    input rounded to a 32767th of its group's largest magnitude errs by at most half of that, times the weights' sizes;
    fp32 sums add their rounding."""
    weight = int4.dequantized(torch.float64)
    exact = F.linear(x.double(), weight)
    top = x.double().abs().reshape(x.shape[0], -1, GROUP).amax(-1).repeat_interleave(GROUP, 1)
    rounding = (top / 32767 / 2) @ weight.abs().T
    magnitude = x.double().abs() @ weight.abs().T
    return exact, 1.01 * rounding + (x.shape[-1] + 8) * 2.0 ** -23 * magnitude


@needs_kernel
@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("width", [32, 96, 1536])
@pytest.mark.parametrize("out", [64, 192])
def test_fp32_rows_are_the_dequantized_product_to_within_the_rows_16bit_rounding(count, width, out):
    int4 = layer(out, width, seed=width + count)
    x = rows(count, width, seed=count)
    got = native_rows.int4_rows_product(x, int4.packed, int4.scales_zeros, packing_block())
    exact, bound = exact_and_bound(int4, x)
    assert got.dtype == torch.float32 and got.shape == (count, out)
    assert bool(((got.double() - exact).abs() <= bound).all())


@needs_kernel
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("width", [64, 1536])
def test_bf16_rows_are_rounded_once_more(count, width):
    int4 = layer(128, width, seed=count)
    x = rows(count, width, seed=width).to(torch.bfloat16)
    got = native_rows.int4_rows_product(x, int4.packed, int4.scales_zeros, packing_block())
    exact, bound = exact_and_bound(int4, x.float())
    assert got.dtype == torch.bfloat16 and got.shape == (count, 128)
    assert bool(((got.double() - exact).abs() <= bound + exact.abs() * 2.0 ** -8).all())


@needs_kernel
def test_the_bound_is_tight_enough_to_catch_a_lost_zero():
    """The bound is far below what a kernel that dropped each group's zero, or swapped two output rows, would err
    by, so the tests above would fail it."""
    int4 = layer(64, 96, seed=5)
    x = rows(1, 96, seed=6)
    exact, bound = exact_and_bound(int4, x)
    scales, zeros = int4.scales_zeros[..., 0].double(), int4.scales_zeros[..., 1].double()  # (in / 32, out)
    lost_zero = ((zeros - 8 * scales) * x.double().reshape(-1, GROUP).sum(-1)[:, None]).sum(0)
    assert bool((lost_zero.abs() > bound[0]).any())
    assert bool(((exact[0] - exact[0].roll(1)).abs() > bound[0]).any())


def test_more_rows_than_a_step_are_not_taken():
    int4 = layer(64, 32)
    assert native_rows.int4_rows_product(torch.zeros(5, 32), int4.packed, int4.scales_zeros, packing_block()) is None


@needs_kernel
def test_a_layer_sends_a_questions_rows_to_the_kernel_and_a_chunk_to_the_widened_weight(monkeypatch):
    """Up to `QUESTION_ROWS` rows (a question prefilled after a read) are the kernel's: widening every weight for them
    costs more. A chunk of more rows multiplies the widened weight."""
    torch.manual_seed(4)
    int4 = Int4Linear.from_linear(nn.Linear(96, 128, bias=True).to(torch.bfloat16), torch.float32)
    calls = []  # the row counts the kernel multiplied
    monkeypatch.setattr(native_rows, "_run", lambda function, x, *rest, real=native_rows._run:
                        calls.append(x.shape[0]) or real(function, x, *rest))
    most = native_rows.QUESTION_ROWS
    x = rows(most + 1, 96, seed=5)
    with torch.no_grad():
        for count in (5, most):
            exact, bound = exact_and_bound(int4, x[:count])
            got = int4(x[:count]) - int4.bias
            assert bool(((got.double() - exact).abs() <= bound).all()), count
        chunk = int4(x)
    assert calls == [5, most]  # the chunk of most + 1 rows did not reach the kernel
    with torch.no_grad():
        half = Int4Linear.from_linear(nn.Linear(96, 128, bias=True).to(torch.bfloat16))
        half(x[:5].bfloat16())
    assert calls == [5, most]  # bf16 rows: only a step's go to the kernel
    expected = F.linear(x, int4.dequantized().float(), int4.bias)
    assert torch.allclose(chunk, expected, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_layers_row_goes_through_the_operator_and_torchs_product_where_the_kernel_declines(dtype, monkeypatch):
    torch.manual_seed(3)
    int4 = Int4Linear.from_linear(nn.Linear(96, 128, bias=True), dtype)
    row = torch.randn(1, 96, dtype=dtype)
    expected = F.linear(row.float(), int4.dequantized().float(), int4.bias.float())
    with_kernel = int4(row)
    monkeypatch.setattr(int4_linear, "int4_rows_product", lambda *tensors: None)
    with_torch = int4(row)
    assert with_kernel.dtype == with_torch.dtype == dtype
    for got in (with_kernel, with_torch):
        assert torch.allclose(got.float(), expected, atol=0.05, rtol=0.02)
    flat = row.to(torch.bfloat16)
    torchs = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, int4.packed, GROUP, int4.scales_zeros)
    assert torch.equal(torch.ops.locret.int4_rows(flat, int4.packed, int4.scales_zeros), torchs)


BOTH_PATHS = """
import hashlib, torch
from torch import nn
from locret_cli.runtime import native_rows
from locret_cli.runtime.int4_linear import Int4Linear, packing_block
linear = nn.Linear(1536, 192, bias=False)  # values from integer formulas: the same under every capability
with torch.no_grad():
    linear.weight.copy_(((torch.arange(192 * 1536) * 104729 % 4093 - 2046) / 65536).reshape(192, 1536))
int4 = Int4Linear.from_linear(linear.to(torch.bfloat16))
n = torch.arange(2 * 1536)
x = ((n * 7919 % 2003 - 1001) / 256 * torch.where(n % 37 == 0, 50, 1)).reshape(2, 1536).float()
outs = [native_rows.int4_rows_product(x.to(dtype), int4.packed, int4.scales_zeros, packing_block())
        for dtype in (torch.float32, torch.bfloat16)]
print(packing_block(), *(hashlib.sha256(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
                         for out in outs))
"""


def test_the_avx2_and_avx512_paths_give_the_same_outputs_bit_for_bit():
    """torch packs blocks of 32 under AVX2 and of 64 under AVX-512; both of the kernel's paths sum each group exactly
    in int32 and add it in fp32 in the same order, so the same rows give the same outputs."""
    cpu = Path("/proc/cpuinfo").read_text()
    if not all(flag in cpu for flag in ("avx512bw", "avx512vbmi", "avx512_vnni")) or not kernel_runs():
        pytest.skip("needs a CPU with AVX-512 BW, VBMI and VNNI, where both paths run")
    printed = []
    for capability in ("avx2", "avx512"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
        done = subprocess.run([sys.executable, "-c", BOTH_PATHS], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout.split())
    assert [p[0] for p in printed] == ["32", "64"]
    assert printed[0][1:] == printed[1][1:]
