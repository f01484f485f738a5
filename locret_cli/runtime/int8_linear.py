"""8-bit weights: every linear layer of a model holds int8 weights with one scale per output row (`--load-8bit`).

A decode step multiplies one row by every weight, so its time is the time to read the weights: int8 halves the
bytes. torch's `_weight_int8pack_mm` multiplies a bf16 or fp32 row by int8 weights directly. For a prefill chunk
that kernel is several times slower than a bf16 product (docs/systems.md), so a chunk dequantizes the weight
first (a few per cent over the bf16 product) and multiplies as usual.

The maintained libraries were measured first, on the same CPU and shapes: torchao 0.18's int8 weight-only linear
casts the whole int8 weight to bf16 at every call, and bitsandbytes 0.50's 8-bit linear runs far slower than bf16
on the CPU. Both made decode slower, not faster (docs/measurements/memory.md).

Quantization is symmetric: scale = max |w| of the row / 127, rounded to the model's dtype first, so that
q × scale is exactly what the layer computes with. The retaining heads are not quantized (they are not part of the
model); the embeddings are not either (a lookup reads a few rows). A tied output layer gets its own int8 copy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.transformers_internals import untie


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) for `weight` (out, in): q int8 (out, in), scale (out,) in the weight's dtype, with
    q × scale ≈ weight to within half a step of each row."""
    scale = (weight.detach().float().abs().amax(dim=1) / 127).to(weight.dtype)  # what the product will use
    scale = scale.clamp(min=torch.finfo(weight.dtype).tiny)  # a row of zeros stays zeros
    q = torch.round(weight.detach().float() / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)
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
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        return cls(*quantize_rows(linear.weight), linear.bias)

    def dequantized(self) -> torch.Tensor:
        """The weight (out, in) in the scale's dtype."""
        return self.weight.to(self.weight_scale.dtype) * self.weight_scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) in the scale's dtype -> (..., out)."""
        if x.numel() == x.shape[-1] and x.device.type == "cpu":  # one row: a decode step
            out = torch._weight_int8pack_mm(x.reshape(1, -1), self.weight, self.weight_scale).view(*x.shape[:-1], -1)
            return out if self.bias is None else out + self.bias
        return F.linear(x, self.dequantized(), self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_linears(model: nn.Module) -> int:
    """Replace every `nn.Linear` of `model` by an Int8Linear in place (untying a tied output layer from the
    embeddings, which keep their dtype). Returns how many were replaced."""
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is nn.Linear]
    for parent, name, child in targets:
        setattr(parent, name, Int8Linear.from_linear(child))
    if targets:
        untie(model)
    return len(targets)
