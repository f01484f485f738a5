"""A few rows times weights as they are stored, by small C kernels of locret's own: bf16 weights
(`native/rows_bf16w.c`), int8 weights with a scale per row (`native/rows_int8w.c`) and 4-bit weights in torch's
packing (`native/rows_int4w.c`).

A decode step multiplies one row by every weight of the model, so its time is the time to read the weights. These
models read them here instead of through torch's product:
- a model computing in fp32 with its weights kept bf16 (`runtime/bf16_weights.py`): torch has no product of fp32
  rows with bf16 weights, and widening every weight at every step is several times slower;
- a model computing in bf16 on the CPU (`take_rows`): torch's one-row bf16 product runs far below the memory
  bandwidth, and oneDNN's faster one (`runtime/packed_linear.py`) needs a packed copy of every linear weight, the
  weights' size again in memory (3.1 GB for Qwen2.5-Coder-1.5B). The kernel reads the weights in place;
- a model with int8 weights (`--load-8bit`, `runtime/int8_linear.py`), in either dtype: torch's one-row int8 product
  (`_weight_int8pack_mm`) ran slower than the fp32 product on AVX2 CPUs, so int8 weights decoded no faster;
- a model with 4-bit weights (`--load-int4`, `runtime/int4_linear.py`): torch's int4 product
  (`_weight_int4pack_mm_for_cpu`) is bound by its arithmetic well below the memory's rate. This kernel reads torch's
  packing as torch made it on this CPU, blocks of 64 output rows (with AVX-512 VBMI and VNNI) or of 32 (with AVX2),
  and holds the row as 16-bit integers per group of 32 inputs (at least 15 bits of the group's largest magnitude),
  so its outputs differ from the dequantized weights' product by that rounding as well as by the order of the sums.

The kernels widen bf16 and int8 numbers exactly and sum the products in fp32, four output rows at once so that each
thread reads four streams of weights (an int8 row's sum then times its scale), so their outputs differ from torch's
only by the order of the sums (and, in bf16, by where that lands the one rounding to bf16). They run on torch's own
OpenMP threads. Each is built where the CPU has AVX2 and FMA and a compiler builds it (`runtime/native_build.py`),
unless `LOCRET_NATIVE_ROWS=0`; chunks of more than `ROWS` rows, and training, keep torch's product. Where a model
computes in fp32 and that product would first widen the whole weight (bf16 weights, int8 and 4-bit ones), inputs of
up to `QUESTION_ROWS` rows go to the kernel too: a question prefilled after a read is a few dozen rows, and widening
every weight of the model for it took longer than the kernel reading them once for every row
(docs/measurements/decode.md).
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

ROWS = 4  # inputs of at most this many rows go to a kernel; more are a chunk, for torch's product
QUESTION_ROWS = 32  # ... or this many fp32 rows where torch's product would widen the weight first (a question)
POINTER, I64 = ctypes.c_void_p, ctypes.c_int64
Kernels = dict[torch.dtype, ctypes._CFuncPtr]  # a kernel's functions by the dtype of the rows they take


def widening_rows(x: torch.Tensor) -> int:
    """The most rows of `x` a kernel takes where torch's product would first widen every weight (bf16 weights kept
    bf16, int8 and 4-bit ones): `QUESTION_ROWS` for fp32 rows, the case measured; `ROWS` for any other dtype."""
    return QUESTION_ROWS if x.dtype == torch.float32 else ROWS


def _built(source: str, names: dict[torch.dtype, str], pointers: int) -> Kernels | None:
    """The functions `names` of `native/<source>`, where this CPU has AVX2 and FMA, a compiler builds them, and
    `LOCRET_NATIVE_ROWS` is not 0; else None. Each takes x, its rows and width, the weight and its rows, then
    `pointers` more (the vectors, then y)."""
    if os.environ.get("LOCRET_NATIVE_ROWS") == "0" or not {"avx2", "fma"} <= set(cpuinfo("flags").split()):
        return None
    built = native_build.build(native_build.NATIVE / source)
    if built is None:
        return None
    functions = {dtype: getattr(built[0], name) for dtype, name in names.items()}
    for function in functions.values():
        function.restype, function.argtypes = ctypes.c_int, [POINTER, I64, I64, POINTER, I64] + [POINTER] * pointers
    return functions


@functools.cache
def kernels() -> Kernels | None:
    """The bf16-weight kernel's functions (x, bias and y in the key's dtype), or None (`_built`)."""
    return _built("rows_bf16w.c", {torch.float32: "rows_bf16w", torch.bfloat16: "rows_bf16"}, 2)


@functools.cache
def int8_kernels() -> Kernels | None:
    """The int8-weight kernel's functions (x, scale, bias and y in the key's dtype), or None (`_built`)."""
    return _built("rows_int8w.c", {torch.float32: "rows_int8w", torch.bfloat16: "rows_int8"}, 3)


INT4_FUNCTIONS = {64: {torch.float32: "rows_int4w", torch.bfloat16: "rows_int4"},  # by torch's packing block
                  32: {torch.float32: "rows_int4w_b32", torch.bfloat16: "rows_int4_b32"}}


@functools.cache
def int4_kernels(block: int) -> Kernels | None:
    """The 4-bit-weight kernel's functions for torch's packing in blocks of `block` output rows (x and y in the key's
    dtype; scales and zeros bf16), or None (`_built`, or a block the kernel has no path for)."""
    names = INT4_FUNCTIONS.get(block)
    return None if names is None else _built("rows_int4w.c", names, 2)


def _takes(x: torch.Tensor, functions: Kernels | None, *vectors: torch.Tensor | None, most: int = ROWS) -> bool:
    """Whether `functions` are built and take `x` (at most `most` rows on the CPU) with `vectors` (each None or
    contiguous in x's dtype)."""
    return (functions is not None and x.dtype in functions and x.numel() <= most * max(x.shape[-1], 1)
            and x.device.type == "cpu"
            and all(v is None or (v.dtype == x.dtype and v.is_contiguous()) for v in vectors))


def _run(function: ctypes._CFuncPtr, x: torch.Tensor, weight: torch.Tensor, *vectors) -> torch.Tensor | None:
    """`function` on x's rows and `weight` (out, in), then `vectors`' pointers: (..., out) in x's dtype, or None
    where the kernel declined."""
    rows = x.numel() // max(x.shape[-1], 1)
    flat = x.reshape(rows, x.shape[-1]).contiguous()
    out = torch.empty(rows, weight.shape[0], dtype=x.dtype)
    pointers = [None if v is None else v.data_ptr() for v in vectors]
    status = function(flat.data_ptr(), rows, flat.shape[1], weight.data_ptr(), weight.shape[0], *pointers,
                      out.data_ptr())
    return out.view(*x.shape[:-1], weight.shape[0]) if status == 0 else None


def rows_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 most: int = ROWS) -> torch.Tensor | None:
    """x (..., in), fp32 or bf16, of at most `most` rows times `weight` (out, in) bf16 on the CPU, plus `bias`
    (out,) in x's dtype: (..., out) in x's dtype, by the kernel; None where the kernel is not built or does not take
    these tensors."""
    functions = kernels()
    if not (_takes(x, functions, bias, most=most) and weight.dtype == torch.bfloat16 and weight.is_contiguous()):
        return None
    return _run(functions[x.dtype], x, weight, bias)


def int8_rows_product(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                      bias: torch.Tensor | None, most: int = ROWS) -> torch.Tensor | None:
    """x (..., in), fp32 or bf16, of at most `most` rows times the int8 weight `q` (out, in) with `scale` (out,),
    plus `bias` (out,), scale and bias in x's dtype: (..., out) = scale × (x qᵀ) + bias in x's dtype, by the int8
    kernel; None where it is not built or does not take these tensors."""
    functions = int8_kernels()
    if not (_takes(x, functions, scale, bias, most=most) and q.dtype == torch.int8 and q.is_contiguous()):
        return None
    return _run(functions[x.dtype], x, q, scale, bias)


def int4_rows_product(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor,
                      block: int, most: int = ROWS) -> torch.Tensor | None:
    """x (..., in), fp32 or bf16, of at most `most` rows times the 4-bit weight `packed` (out, in / 2) uint8 in
    torch's CPU packing of `block` output rows a block with `scales_zeros` (in / 32, out, 2) bf16: (..., out) in x's
    dtype, by the 4-bit kernel; None where it is not built, this CPU lacks what its path for `block` needs (AVX-512
    VBMI and VNNI for 64, AVX2 for 32), or it does not take these tensors."""
    functions = int4_kernels(block)
    if not (_takes(x, functions, most=most) and packed.dtype == torch.uint8 and packed.is_contiguous()
            and scales_zeros.dtype == torch.bfloat16 and scales_zeros.is_contiguous()):
        return None
    return _run(functions[x.dtype], x, packed, scales_zeros)


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

