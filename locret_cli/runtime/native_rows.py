"""A few rows times bf16 weights as they are stored, by a small C kernel of locret's own (`native/rows_bf16w.c`).

A decode step multiplies one row by every weight of the model, so its time is the time to read the weights. Two
kinds of model read them here instead of through torch's product:
- a model computing in fp32 with its weights kept bf16 (`runtime/bf16_weights.py`): torch has no product of fp32
  rows with bf16 weights, and widening every weight at every step is several times slower;
- a model computing in bf16 on the CPU (`take_rows`): torch's one-row bf16 product runs far below the memory
  bandwidth, and oneDNN's faster one (`runtime/packed_linear.py`) needs a packed copy of every linear weight, the
  weights' size again in memory (3.1 GB for Qwen2.5-Coder-1.5B). The kernel reads the weights in place.

The kernel widens bf16 numbers exactly and sums the products in fp32, eight lanes and four accumulators to a row,
so its outputs differ from torch's only by the order of the sums (and, in bf16, by where that lands the one
rounding to bf16). It runs on torch's own OpenMP threads. It is built where the CPU has AVX2 and FMA and a compiler
builds it (`runtime/native_build.py`), unless `LOCRET_NATIVE_ROWS=0`; chunks of more than `ROWS` rows, and
training, keep torch's product.
"""

from __future__ import annotations

import ctypes
import functools
import os
import types

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.profile_marks import ROWS_KERNEL, mark
from locret_cli.runtime import native_build
from locret_cli.runtime.dtype_probe import cpuinfo

SOURCE = native_build.NATIVE / "rows_bf16w.c"
ROWS = 4  # inputs of at most this many rows go to the kernel; more are a chunk, for torch's product
POINTER, I64 = ctypes.c_void_p, ctypes.c_int64
FUNCTIONS = {torch.float32: "rows_bf16w", torch.bfloat16: "rows_bf16"}  # by the rows' dtype


@functools.cache
def kernels() -> dict[torch.dtype, ctypes._CFuncPtr] | None:
    """The built functions by the dtype of the rows they take, where this CPU has AVX2 and FMA, a compiler builds
    them, and `LOCRET_NATIVE_ROWS` is not 0; else None."""
    if os.environ.get("LOCRET_NATIVE_ROWS") == "0" or not {"avx2", "fma"} <= set(cpuinfo("flags").split()):
        return None
    built = native_build.build(SOURCE)
    if built is None:
        return None
    functions = {dtype: getattr(built[0], name) for dtype, name in FUNCTIONS.items()}
    for function in functions.values():
        function.restype, function.argtypes = ctypes.c_int, [POINTER, I64, I64, POINTER, I64, POINTER, POINTER]
    return functions


def rows_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """x (..., in), fp32 or bf16, of at most `ROWS` rows times `weight` (out, in) bf16 on the CPU, plus `bias`
    (out,) in x's dtype: (..., out) in x's dtype, by the kernel; None where the kernel is not built or does not take
    these tensors."""
    functions = kernels()
    rows = x.numel() // max(x.shape[-1], 1)
    if (functions is None or x.dtype not in functions or rows > ROWS or x.device.type != "cpu"
            or weight.dtype != torch.bfloat16 or not weight.is_contiguous()
            or (bias is not None and (bias.dtype != x.dtype or not bias.is_contiguous()))):
        return None
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    out = torch.empty(rows, weight.shape[0], dtype=x.dtype)
    status = functions[x.dtype](flat.data_ptr(), rows, flat.shape[1], weight.data_ptr(), weight.shape[0],
                                None if bias is None else bias.data_ptr(), out.data_ptr())
    return out.view(*x.shape[:-1], weight.shape[0]) if status == 0 else None


def _rows_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
        with mark(ROWS_KERNEL):
            out = rows_product(x, self.weight, self.bias)
        if out is not None:
            return out
    return F.linear(x, self.weight, self.bias)


def takes_rows(module: nn.Module) -> bool:
    """Whether `module` is a plain bf16 `nn.Linear` on the CPU with torch's forward, which `take_rows` would give
    the kernel's (a weight left on disk by `--max-memory` is on the meta device, its forward the loading hook's)."""
    return (type(module) is nn.Linear and module.weight.dtype == torch.bfloat16 and module.weight.device.type == "cpu"
            and module.weight.is_contiguous() and "forward" not in vars(module))


def take_rows(model: nn.Module) -> int:
    """Give every plain bf16 linear of `model` on the CPU a forward that sends inputs of at most `ROWS` rows to the
    kernel and the rest to torch's product; returns the bytes of the weights it reads in place (0 where the kernel
    is not built). Idempotent: a linear that has a forward of its own keeps it."""
    if kernels() is None:
        return 0
    taken = [m for m in model.modules() if takes_rows(m)]
    for module in taken:
        module.forward = types.MethodType(_rows_forward, module)
    return sum({id(m.weight): m.weight.numel() * 2 for m in taken}.values())

