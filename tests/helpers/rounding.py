"""Checks of products computed in fp32 and rounded to bf16 once."""

from __future__ import annotations

import torch


def within_rounding(got: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor) -> bool:
    """Whether each bf16 `got` is a rounding to bf16 of a number within `bound` of `exact`: at most one bf16 step
    (8 significant bits) of the larger magnitude beyond the bound."""
    reach = exact.abs() + bound
    step = torch.exp2(torch.floor(torch.log2(reach.clamp(min=2.0 ** -120))) - 7)
    return bool(((got.double() - exact).abs() <= bound + step).all())
