"""bf16 linear layers on the CPU, for one row at a time, through oneDNN's packed weights.

A bf16 `F.linear` with one row of input (every decode step) runs far below these CPUs' memory bandwidth: a
1536×576 product took 61 µs unpacked and 36 µs packed (docs/performance.md). Weights reordered once into oneDNN's
blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and multiplied with `_linear_pointwise`, the pair
torch.compile's CPU backend emits for frozen linears, give the same numbers as `F.linear` for one row. For a
prefill chunk they round some products' last bit differently (SmolLM2's 576×576 projections at 1,024 rows), which
can change a greedy answer, and they are barely faster there: chunks keep `F.linear`.

The packed copy is held beside the original weight, which stays as it is for everything else that reads it
(state dicts, fingerprints, tied embeddings), so packing costs the linear weights' size again in memory. Only plain
`nn.Linear` modules with bf16 weights on the CPU are packed; 4-bit and other layers keep their own forward. oneDNN
packs bf16 only on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT; on others (an AVX2-only AMD EPYC, most
laptops before them) nothing is packed (`packing_works`).
"""

from __future__ import annotations

import functools
import types

import torch
import torch.nn.functional as F
from torch import nn

PACKED_ATTRIBUTE = "locret_packed_weight"


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    """`weight` (out, in) bf16, packed into oneDNN's blocked layout for products of one row."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, 1)


@functools.cache
def packing_works() -> bool:
    """Whether this torch build has the oneDNN ops and this CPU can pack bf16 weights (oneDNN refuses on a CPU
    without AVX-512 or AVX-NE-CONVERT)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        _reorder(torch.zeros(16, 16, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def packable(module: nn.Module) -> bool:
    """Whether `module` is a plain bf16 `nn.Linear` on the CPU, and this machine can pack it (`packing_works`)."""
    return (type(module) is nn.Linear and module.weight.dtype == torch.bfloat16 and module.weight.device.type == "cpu"
            and packing_works())


def _packed_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    one_row = x.numel() == x.shape[-1]
    if not one_row or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
        return F.linear(x, self.weight, self.bias)  # chunks, and training (the packed product has no backward)
    return torch.ops.mkldnn._linear_pointwise(x, getattr(self, PACKED_ATTRIBUTE), self.bias, "none", [], "")


def pack_linears(model: nn.Module) -> int:
    """Give every packable linear of `model` a copy of its weight packed for one-row products, and a forward that
    uses it for one row. Returns how many were packed; idempotent."""
    packed = 0
    for module in model.modules():
        if packable(module) and not hasattr(module, PACKED_ATTRIBUTE):
            with torch.no_grad():
                setattr(module, PACKED_ATTRIBUTE, _reorder(module.weight))
            module.forward = types.MethodType(_packed_forward, module)
            packed += 1
    return packed


def pack_if_room(model: nn.Module) -> int:
    """`pack_linears` when the packed copies take at most half the memory free on the model's device; returns the
    bytes packed so far (0 when nothing was, or could be)."""
    from locret_cli.core.measure import available_memory
    from locret_cli.models.offload import is_offloaded

    if is_offloaded(model):
        return 0  # weights are on disk (`--max-memory`): the memory allowed is for them, not for packed copies
    extra = sum(m.weight.numel() * 2 for m in model.modules() if packable(m) and not hasattr(m, PACKED_ATTRIBUTE))
    if extra and extra <= available_memory(next(model.parameters()).device) // 2:
        pack_linears(model)
    return sum(getattr(m, PACKED_ATTRIBUTE).numel() * 2 for m in model.modules() if hasattr(m, PACKED_ATTRIBUTE))
