"""4-bit weights: every linear layer of a model holds its weights in 4 bits, with a scale and a zero per output row
and group of 32 inputs (`--load-int4`), as gpt-fast holds them.

A decode step multiplies one row by every weight, so its time is the time to read the weights: 4 bits are a
quarter of bf16's bytes and half of int8's. The weights are kept as torch packs them for its CPU int4 product
(`_convert_weight_to_int4pack_for_cpu`), and that packing is all that is kept. Its layout depends on the CPU torch
runs on (output rows in blocks of 64 where its kernels use AVX-512, of 32 where they use AVX2), so it is read the way
torch packed it here (`packing_block`). A step's rows go to locret's kernel on that packing (`native/rows_int4w.c`, via
`native_rows`: blocks of 64 where the CPU has AVX-512 VBMI and VNNI, of 32 with AVX2), else to torch's product
(`_weight_int4pack_mm_for_cpu`), which its arithmetic holds well below the memory's rate. A prefill chunk
multiplies faster by a dense product, so the weight is widened into one reused buffer first (bf16, or fp32 where the
model computes in fp32), by locret's small C kernel (`native/int4_weights.c`, eight values at a time with AVX2; where
it is not built, by torch's ops, several times slower), and multiplied as usual. Widening the whole weight costs
more than locret's kernel takes for a few dozen fp32 rows, so inputs of up to `native_rows.QUESTION_ROWS` fp32 rows
(a question prefilled after the read) go to the kernel where it is built (docs/measurements/decode.md; bf16 rows,
on CPUs whose dense bf16 product is fast, were not measured).

Quantization is affine per group: weight = (q - 8) × scale + zero, q in 0..15. Where a group's values already lie on
a grid of at most 16 evenly spaced steps (a 4-bit GGUF's Q4_K blocks, dequantized, do), the grid is found and kept:
those weights are held as they were given, to within bf16 rounding of the scale. Any other group takes the step
that spans its smallest and largest value in 15. The embeddings are held int8 (`int8_linear.Int8Embedding`), and a
tied output layer shares that table. A layer whose shape torch's packing does not take (outputs not a multiple of
64, inputs not of 32) is held int8; so, where a model's other layers lie on 4-bit grids (a Q4_K_M GGUF's), is a layer
that does not (the file held it in 6 bits): each layer keeps about the bits its file gave it (`four_bit_layers`).
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.profile_marks import ROWS_KERNEL, WIDEN, mark
from locret_cli.errors import LocretError
from locret_cli.runtime import native_build
from locret_cli.runtime.bf16_weights import scratch, widened
from locret_cli.runtime.mapped_pages import CheckpointPages
from locret_cli.runtime.native_rows import int4_rows_product, widening_rows

GROUP = 32  # inputs per scale and zero
ROWS = 4  # inputs of at most this many rows go to a rows' product (`_rows_product`); more are a chunk, widened
GRID_SLACK = 0.1  # a value within this share of a step of the grid lies on it (bf16 rounding is far less)
SPANS = (15, 14, 13, 12)  # the grids looked for: a Q4_K block's range is 15 or 14 of its steps, rarely 13
BLOCK_ROWS = 4096  # rows quantized at a time


@functools.cache
def packing_block() -> int:
    """How many output rows torch's CPU int4 packing holds in one block on this CPU (64 with AVX-512, 32 with AVX2):
    the one of 64, 32 and 16 under which a packed probe reads back value for value."""
    q = (torch.arange(64 * 64, dtype=torch.int32).reshape(64, 64) * 7 // 3) % 16
    flat = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2).reshape(-1).to(torch.int32)
    n, k = torch.arange(64)[:, None], torch.arange(64)[None, :]
    for block in (64, 32, 16):
        bits = flat[_packed_byte(n, k, 64, block)]
        if torch.equal(torch.where(n % block < block // 2, bits & 15, bits >> 4), q):
            return block
    raise LocretError("torch's 4-bit packing on this CPU is not one locret reads: load without --load-int4")


def _packed_byte(n: torch.Tensor, k: torch.Tensor, inputs: int, block: int) -> torch.Tensor:
    """The byte of torch's packing that holds output row `n`'s value for input `k` (low nibble for the block's first
    half of rows, high for its second)."""
    return ((n // block) * (inputs // 2) + k // 2) * block + (block // 2) * (k % 2) + n % (block // 2)


def takes(linear: nn.Linear) -> bool:
    """Whether torch's int4 packing takes this layer's weight: outputs a multiple of 64, inputs of `GROUP`."""
    out, inputs = linear.weight.shape
    return out % 64 == 0 and inputs % GROUP == 0


def quantize_groups(weight: torch.Tensor, pages: CheckpointPages | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed, scales_zeros) for `weight` (out, in): the 4-bit values in torch's CPU packing (out, in / 2) uint8, and
    per group of `GROUP` inputs and output row the scale and zero (in / GROUP, out, 2) in bf16, with weight ≈
    (q - 8) × scale + zero. `BLOCK_ROWS` rows at a time (a multiple of 64: torch packs blocks of at most 64 rows apart),
    so that the intermediates of an output layer stay small; with `pages`, each block's checkpoint pages are handed back
    once it is quantized, as `int8_linear.quantize_rows` hands them back."""
    packing_block()  # a packing locret cannot read is refused before any weight is quantized
    out, inputs = weight.shape
    packed = torch.empty(out, inputs // 2, dtype=torch.uint8)
    step, low = torch.empty(out, inputs // GROUP), torch.empty(out, inputs // GROUP)
    for first in range(0, out, BLOCK_ROWS):
        rows = slice(first, first + BLOCK_ROWS)
        q, step[rows], low[rows], _ = quantized_block(weight.detach()[rows].float().contiguous())
        packed[rows] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
        if pages is not None:
            pages.release(weight.detach()[rows])
    zero = low + 8 * step  # torch's form: (q - 8) × scale + zero
    return packed, torch.stack([step, zero], -1).transpose(0, 1).contiguous().to(torch.bfloat16)


def quantized_block(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(q int32 (rows, in) in 0..15, step and low (rows, in / GROUP) fp32, how many groups kept a grid) for
    contiguous fp32 `rows`, by the C kernel (`native/int4_weights.c`), else by `_quantized_block`: the same with
    torch's ops, many times slower."""
    functions = int4_kernels()
    if functions is None:
        return _quantized_block(rows)
    groups = rows.numel() // GROUP
    q = torch.empty(rows.shape, dtype=torch.int32)
    step, low = torch.empty(rows.shape[0], rows.shape[1] // GROUP), torch.empty(rows.shape[0], rows.shape[1] // GROUP)
    kept = functions.quantize_int4(rows.data_ptr(), groups, ctypes.c_float(GRID_SLACK), q.data_ptr(),
                                   step.data_ptr(), low.data_ptr())
    return q, step, low, kept


def _quantized_block(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """`quantize_groups` of some rows (fp32). A group whose values lie on an evenly spaced grid whose range is one of
    `SPANS` steps keeps that grid, fitted by least squares; any other spans its range in 15 steps."""
    groups = rows.reshape(rows.shape[0], -1, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    spread = (high - low).clamp(min=torch.finfo(torch.float32).tiny)
    k, on_grid = torch.zeros_like(groups), torch.zeros_like(low, dtype=torch.bool)
    for span in SPANS:
        offsets = (groups - low[..., None]) / (spread / span)[..., None]
        rounded = offsets.round()
        fits = ((offsets - rounded).abs() <= GRID_SLACK).all(-1) & ~on_grid
        k = torch.where(fits[..., None], rounded, k)
        on_grid |= fits
    centred = k - k.mean(-1, keepdim=True)
    fitted = (centred * groups).sum(-1) / (centred * centred).sum(-1).clamp(min=1e-12)  # v ≈ a + b k
    step = torch.where(on_grid, fitted, spread / 15)
    low = torch.where(on_grid, groups.mean(-1) - fitted * k.mean(-1), low)
    q = torch.where(on_grid[..., None], k, ((groups - low[..., None]) / step[..., None]).round())
    return q.clamp(0, 15).to(torch.int32).reshape(rows.shape), step, low, int(on_grid.sum())


def grid_share(weight: torch.Tensor, rows: int = 64) -> float:
    """The share of the groups of `weight`'s first `rows` rows that lie on a 4-bit grid."""
    sample = weight.detach()[:rows].float().contiguous()
    return quantized_block(sample)[3] / max(sample.numel() // GROUP, 1)


def four_bit_layers(linears: list[nn.Linear]) -> list[bool]:
    """Which of `linears` to hold in 4 bits: those torch packs (`takes`). Where some of them lie on 4-bit grids (a
    4-bit GGUF's Q4_K tensors), only those: the file held the others in more bits (its Q6_K), and they keep 8."""
    packs = [takes(linear) for linear in linears]
    on_grid = [packed and grid_share(linear.weight) > 0.5 for linear, packed in zip(linears, packs)]
    return on_grid if any(on_grid) else packs


class Int4Linear(nn.Module):
    """A linear layer with 4-bit weights in torch's CPU packing (`packed`), `scales_zeros` (in / GROUP, out, 2) in
    bf16 and an optional bias."""

    def __init__(self, packed: torch.Tensor, scales_zeros: torch.Tensor, in_features: int,
                 bias: torch.Tensor | None):
        super().__init__()
        self.in_features, self.out_features = in_features, scales_zeros.shape[1]
        self.register_buffer("packed", packed)
        self.register_buffer("scales_zeros", scales_zeros)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype | None = None,
                    pages: CheckpointPages | None = None) -> Int4Linear:
        """`linear` quantized (`quantize_groups`, with `pages`); its bias in `dtype` (default its weight's)."""
        bias = None if linear.bias is None else linear.bias.detach().to(dtype or linear.weight.dtype)
        return cls(*quantize_groups(linear.weight, pages), linear.weight.shape[1], bias)

    def dequantized(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The weight (out, in) in `dtype` (float64: exactly as the scales and zeros give it), a tensor of its own
        (by torch's ops)."""
        block = packing_block()
        blocks = self.packed.view(self.out_features // block, self.in_features // 2, 2, block // 2)
        q = torch.stack([blocks & 15, blocks >> 4], 2).permute(0, 2, 4, 1, 3).reshape(self.out_features, -1)
        wide = torch.float64 if dtype == torch.float64 else torch.float32
        scale, zero = (self.scales_zeros[..., i].t().to(wide).repeat_interleave(GROUP, 1) for i in (0, 1))
        return ((q.to(wide) - 8) * scale + zero).to(dtype)

    def sampled_weight(self, index: torch.Tensor) -> torch.Tensor:
        """The weight's values (fp32) at flat indices `index` of its (out, in) shape, read from the packing."""
        n, k = index // self.in_features, index % self.in_features
        block = packing_block()
        bits = self.packed.reshape(-1)[_packed_byte(n, k, self.in_features, block)].to(torch.int32)
        q = torch.where(n % block < block // 2, bits & 15, bits >> 4)
        sz = self.scales_zeros[k // GROUP, n].float()
        return ((q - 8) * sz[:, 0] + sz[:, 1]).to(torch.bfloat16).float()  # as `dequantized` rounds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out), in x's dtype."""
        rows = x.numel() // self.in_features
        if torch.is_grad_enabled() and x.requires_grad:
            return F.linear(x, self.dequantized().to(x.dtype), self.bias)
        if rows <= ROWS:
            if torch.compiler.is_compiling():  # a compiled step (`--compile-decode`) traces the operator alone
                return self._rows_product(x, rows, torch.ops.locret.int4_rows)
            with mark(ROWS_KERNEL):
                return self._rows_product(x, rows, _kernel_rows)
        if rows <= (most := widening_rows(x)):
            with mark(ROWS_KERNEL):
                out = int4_rows_product(x, self.packed, self.scales_zeros, packing_block(), most=most)
            if out is not None:
                return out if self.bias is None else out + self.bias
        with mark(WIDEN):
            weight_t = self._widened_t(torch.float32 if x.dtype == torch.float32 else torch.bfloat16)
            weight_t = weight_t if weight_t.dtype == x.dtype else widened(weight_t, x.dtype)
        return F.linear(x, weight_t.t(), self.bias)

    def _rows_product(self, x: torch.Tensor, rows: int, product) -> torch.Tensor:
        """x's `rows` rows by `product` (`_kernel_rows`, or in a compiled step the same as `locret::int4_rows`),
        plus the bias: (..., out) in x's dtype."""
        out = product(x.reshape(rows, self.in_features), self.packed, self.scales_zeros)
        out = out.view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def _widened_t(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The weight transposed (in, out), its values rounded to bf16, in `dtype` (bf16, or fp32 for a model
        computing in fp32: written wide at once, not copied again), in the one reused buffer of that dtype
        (`bf16_weights.scratch`)."""
        buffer = scratch(self.in_features * self.out_features, dtype).view(self.in_features, -1)
        functions = int4_kernels()
        if functions is None or functions.widen_int4(self.packed.data_ptr(), self.out_features, self.in_features,
                                                     self.scales_zeros.data_ptr(), GROUP, packing_block(),
                                                     buffer.data_ptr(), int(dtype == torch.float32)) != 0:
            buffer.copy_(self.dequantized().t())
        return buffer

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4, groups of {GROUP}"


def _kernel_rows(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor) -> torch.Tensor:
    """x's rows (fp32 or bf16) times the packed weight, in x's dtype: by locret's kernel, which takes either, else by
    torch's int4 product on the rows rounded to bf16."""
    out = int4_rows_product(x, packed, scales_zeros, packing_block())
    if out is not None:
        return out
    product = torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(torch.bfloat16), packed, GROUP, scales_zeros)
    return product.to(x.dtype)


# the product as an operator, so that a compiled step (`--compile-decode`) calls the kernel in its graph (a ctypes
# call does not trace); an eager step calls `_kernel_rows` itself
_LIBRARY = torch.library.Library("locret", "FRAGMENT")
_LIBRARY.define("int4_rows(Tensor x, Tensor packed, Tensor scales_zeros) -> Tensor")
_LIBRARY.impl("int4_rows", _kernel_rows, "CPU")
_LIBRARY.impl("int4_rows", lambda x, packed, scales_zeros: x.new_empty(x.shape[0], packed.shape[0]), "Meta")


@functools.cache
def int4_kernels() -> ctypes.CDLL | None:
    """`native/int4_weights.c`, built, or None where no compiler builds it or `LOCRET_NATIVE_ROWS` is 0."""
    if os.environ.get("LOCRET_NATIVE_ROWS") == "0":
        return None
    built = native_build.build(native_build.NATIVE / "int4_weights.c")
    if built is None:
        return None
    library = built[0]
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    library.widen_int4.restype, library.quantize_int4.restype = ctypes.c_int, ctypes.c_int64
    library.widen_int4.argtypes = [pointer, size, size, pointer, size, size, pointer, ctypes.c_int]
    library.quantize_int4.argtypes = [pointer, size, ctypes.c_float, pointer, pointer, pointer]
    return library
