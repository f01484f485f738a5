"""8-bit weights: every linear layer of a model holds int8 weights with one scale per output row (`--load-8bit`).

A decode step multiplies one row by every weight, so its time is the time to read the weights: int8 halves bf16's
bytes and quarters fp32's. A step's rows go to locret's int8 kernel (`runtime/native_rows.py`), which reads the int8
weights in place; without it (no AVX2, no compiler, `LOCRET_NATIVE_ROWS=0`) to torch's `_weight_int8pack_mm`, which
on AVX2 CPUs ran slower than the fp32 product. For a prefill chunk both are several times slower than a dense
product (docs/systems.md), so a chunk dequantizes the weight into one reused buffer (`bf16_weights.widened`, a few
per cent over the product) and multiplies as usual; in fp32, a question's few dozen rows (`native_rows.QUESTION_ROWS`)
stay with the kernel, which took less time than dequantizing every weight for them (bf16 rows: not measured).

On a CPU that computes in fp32 (`runtime/bf16_weights.py`), a bf16 checkpoint loads bf16 and quantizes from those
weights, with fp32 scales: the fp32 weights are never made.

Each bf16 weight of a checkpoint mapped from its file is read once, to quantize it, and its pages are then handed
back (`runtime/mapped_pages.py`): else they stayed resident beside the int8 weights.

The maintained libraries were measured first, on the same CPU and shapes: torchao 0.18's int8 weight-only linear
casts the whole int8 weight to bf16 at every call, and bitsandbytes 0.50's 8-bit linear runs far slower than bf16
on the CPU. Both made decode slower, not faster (docs/measurements/memory.md).

Quantization is symmetric: scale = max |w| of the row / 127, rounded to the model's dtype first, so that
q × scale is exactly what the layer computes with. The retaining heads are not quantized (they are not part of the
model). The input embeddings are, row by row the same way (`Int8Embedding`: a lookup multiplies the rows it reads by
their scales), and a tied output layer shares their int8 weight. Left bf16, a lookup reads a few rows, but the
kernel maps a checkpoint file's pages in large folios (2 MB a fault on Linux 6.18), so the rows of any real document
make the whole table resident: 0.44 GiB of a Qwen2.5-Coder-1.5B's peak.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.heads import COMPUTES_IN
from locret_cli.core.profile_marks import ROWS_KERNEL, WIDEN, mark
from locret_cli.core.transformers_internals import untie
from locret_cli.runtime import int4_linear
from locret_cli.runtime.bf16_weights import widened
from locret_cli.runtime.mapped_pages import CheckpointPages, trim_heap
from locret_cli.runtime.native_rows import int8_rows_product, widening_rows

BLOCK_ROWS = 4096  # rows quantized at a time


def _kernel_rows(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x's rows times int8 `weight` with `scale` by locret's kernel, else torch's product (one row, the CPU)."""
    out = int8_rows_product(x, weight, scale, None)
    return out if out is not None else torch._weight_int8pack_mm(x, weight, scale)


# the kernel as an operator a compiled step (`--compile-decode`) calls in its graph: a ctypes call does not trace, and
# torch's own product runs at about half the memory's rate here (docs/measurements/memory.md)
_LIBRARY = torch.library.Library("locret", "FRAGMENT")
_LIBRARY.define("int8_rows(Tensor x, Tensor weight, Tensor scale) -> Tensor")
_LIBRARY.impl("int8_rows", _kernel_rows, "CPU")
_LIBRARY.impl("int8_rows", lambda x, weight, scale: x.new_empty(x.shape[0], weight.shape[0]), "Meta")


def quantize_rows(weight: torch.Tensor, dtype: torch.dtype | None = None,
                  pages: CheckpointPages | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) for `weight` (out, in): q int8 (out, in), scale (out,) in `dtype` (the dtype the model computes
    in; default the weight's), with q × scale ≈ weight to within half a step of each row. Rows are quantized
    `BLOCK_ROWS` at a time, so that an output layer's fp32 intermediates stay small; with `pages`, each block's
    checkpoint pages are handed back once it is quantized, so that a large table is never resident whole."""
    dtype = dtype or weight.dtype
    q = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scale = torch.empty(weight.shape[0], dtype=dtype, device=weight.device)
    for first in range(0, weight.shape[0], BLOCK_ROWS):
        rows = weight.detach()[first:first + BLOCK_ROWS].float()
        block = (rows.abs().amax(dim=1) / 127).to(dtype)  # what the product will use
        block = block.clamp(min=torch.finfo(dtype).tiny)  # a row of zeros stays zeros
        scale[first:first + BLOCK_ROWS] = block
        q[first:first + BLOCK_ROWS] = torch.round(rows / block.float()[:, None]).clamp(-127, 127)
        if pages is not None:
            pages.release(weight.detach()[first:first + BLOCK_ROWS])
    return q, scale


class Int8Linear(nn.Module):
    """A linear layer with int8 weights (out, in), a per-row `weight_scale` (out,) and an optional bias. The scale's
    name is the weight's with `core.identity.ROW_SCALE` after it, so identities sample the dequantized values."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype | None = None,
                    pages: CheckpointPages | None = None) -> "Int8Linear":
        """`linear` quantized, computing in `dtype` (default its weight's): the scale and the bias in it; `pages`: as
        `quantize_rows` takes them."""
        bias = None if linear.bias is None or dtype is None else linear.bias.to(dtype)
        return cls(*quantize_rows(linear.weight, dtype, pages), linear.bias if dtype is None else bias)

    def dequantized(self) -> torch.Tensor:
        """The weight (out, in) in the scale's dtype, a tensor of its own."""
        return self.weight.to(self.weight_scale.dtype) * self.weight_scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) in the scale's dtype -> (..., out)."""
        if torch.is_grad_enabled() and x.requires_grad:
            return F.linear(x, self.dequantized(), self.bias)
        if torch.compiler.is_compiling():  # a compiled step (`--compile-decode`) traces operators, not ctypes calls
            return self._operator_product(x, torch.ops.locret.int8_rows)
        with mark(ROWS_KERNEL):
            out = int8_rows_product(x, self.weight, self.weight_scale, self.bias, most=widening_rows(x))
        if out is not None:
            return out
        if x.device.type != "cpu" or x.numel() == x.shape[-1]:
            return self._operator_product(x)
        with mark(WIDEN):
            weight = widened(self.weight, self.weight_scale.dtype).mul_(self.weight_scale[:, None])
        return F.linear(x, weight, self.bias)

    def _operator_product(self, x: torch.Tensor, one_row=torch._weight_int8pack_mm) -> torch.Tensor:
        """An operator's product: one row on the CPU by `one_row` (torch's `_weight_int8pack_mm`, or in a compiled
        step locret's kernel as `locret::int8_rows`), else with the weight dequantized."""
        if x.numel() == x.shape[-1] and x.device.type == "cpu":
            out = one_row(x.reshape(1, -1), self.weight, self.weight_scale).view(*x.shape[:-1], -1)
            return out if self.bias is None else out + self.bias
        return F.linear(x, self.dequantized(), self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class Int8Embedding(nn.Module):
    """An embedding table held as int8 rows (vocabulary, hidden) with a per-row `weight_scale`: a lookup returns the
    rows it reads, each times its scale, in the scale's dtype. It may share both tensors with a tied output layer."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor):
        super().__init__()
        self.num_embeddings, self.embedding_dim = weight.shape
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", weight_scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids].to(self.weight_scale.dtype) * self.weight_scale[ids].unsqueeze(-1)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, int8"


def quantize_linears(model: nn.Module, bits: int = 8) -> int:
    """Replace every `nn.Linear` of `model` by an Int8Linear (with `bits` 4, an `int4_linear.Int4Linear` where
    `int4_linear.four_bit_layers` says) and its input embeddings by an Int8Embedding, in place,
    computing in the dtype the model records (`core.heads.COMPUTES_IN`, for bf16 weights kept beside fp32
    arithmetic), else each weight's own; a tied output layer and the embeddings share one int8 weight. Returns how
    many linear layers were replaced."""
    computes_in = getattr(model, COMPUTES_IN, None)
    pages = CheckpointPages()  # a checkpoint's pages, each read whole once and never again
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    table = embeddings.weight if type(embeddings) is nn.Embedding else None
    if table is not None:  # first: its pages are handed back before the int8 linears take their room
        model.set_input_embeddings(Int8Embedding(*quantize_rows(table, computes_in, pages)))
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear]
    four = int4_linear.four_bit_layers([child for _, _, child in targets]) if bits == 4 else [False] * len(targets)
    for (parent, name, child), in_4bits in zip(targets, four):
        if child.weight is table:  # a tied output layer: the embeddings' int8 table, as a linear layer
            quantized = model.get_input_embeddings()
            bias = None if child.bias is None else child.bias.to(quantized.weight_scale.dtype)
            setattr(parent, name, Int8Linear(quantized.weight, quantized.weight_scale, bias))
        elif in_4bits:
            setattr(parent, name, int4_linear.Int4Linear.from_linear(child, computes_in, pages))
        else:
            setattr(parent, name, Int8Linear.from_linear(child, computes_in, pages))
        trim_heap()  # its blocks' fp32 temporaries, freed among live int8 weights, else kept resident by glibc
    if targets:
        untie(model)
    return len(targets)
