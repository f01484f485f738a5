"""bf16 linear layers on the CPU, for one row at a time, through oneDNN's packed weights.

A bf16 `F.linear` with one row of input (every decode step) runs far below these CPUs' memory bandwidth, and slower
than the same product on packed weights (docs/measurements/what-makes-it-fast.md). Weights reordered once into
oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and multiplied with `_linear_pointwise`, the
pair torch.compile's CPU backend emits for frozen linears, give the same numbers as `F.linear` for one row. For a
prefill chunk they round some products' last bit differently (SmolLM2's 576×576 projections at 1,024 rows), which
can change a greedy answer, and they are barely faster there: chunks keep `F.linear`.

Linears that read the same input (a layer's q, k and v projections; its gate and up projections) share one packed
weight, so one product serves them all: a decode step's linears take less time than with a packed weight each,
with the same outputs bit for bit (docs/measurements/what-makes-it-fast.md).

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

from locret_cli.core.transformers_internals import SIBLING_LINEARS

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
    """Whether `module` is a plain bf16 `nn.Linear` on the CPU with its own forward (not one computing in fp32 from
    bf16 weights, `runtime/bf16_weights.py`), and this machine can pack it (`packing_works`)."""
    return (type(module) is nn.Linear and module.weight.dtype == torch.bfloat16 and module.weight.device.type == "cpu"
            and "forward" not in vars(module) and packing_works())


class PackedRows:
    """One packed weight for linears that read the same input: a layer's q, k and v projections, or its gate and up
    projections (`SIBLING_LINEARS`), or one linear alone. The first of them to see a one-row input computes every output in
    one product, and each takes its slice: one call where there were three, with the same outputs bit for bit (each
    output is the same dot product; tests/test_speed.py)."""

    def __init__(self, modules: list[nn.Linear]):
        self.weight = _reorder(torch.cat([m.weight for m in modules]))
        self.bias = None if modules[0].bias is None else torch.cat([m.bias for m in modules])
        self.sizes = [m.out_features for m in modules]
        self._input, self._version, self._outputs = None, -1, ()

    def output(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The `index`-th linear's output for the one-row `x`, computed with its siblings' on the first call."""
        if x is not self._input or x._version != self._version:
            out = torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
            self._input, self._version, self._outputs = x, x._version, out.split(self.sizes, -1)
        return self._outputs[index]


def _packed_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    one_row = x.numel() == x.shape[-1]
    if not one_row or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)):
        return F.linear(x, self.weight, self.bias)  # chunks, and training (the packed product has no backward)
    rows, index = getattr(self, PACKED_ATTRIBUTE)
    return rows.output(index, x)


def pack_linears(model: nn.Module, siblings: tuple[tuple[str, ...], ...] = SIBLING_LINEARS) -> int:
    """Give every packable linear of `model` a weight packed for one-row products (shared with its `siblings` where
    all of them are packable and alike in bias), and a forward that uses it for one row. Returns how many linears
    were packed; idempotent."""
    groups = []
    for parent in model.modules():
        for names in siblings:
            members = [getattr(parent, name, None) for name in names]
            if all(packable(m) and not hasattr(m, PACKED_ATTRIBUTE) for m in members) and \
                    len({m.bias is None for m in members}) == 1:
                groups.append(members)
    grouped = {id(m) for members in groups for m in members}
    groups += [[m] for m in model.modules()
               if packable(m) and not hasattr(m, PACKED_ATTRIBUTE) and id(m) not in grouped]
    for members in groups:
        with torch.no_grad():
            rows = PackedRows(members)
        for index, module in enumerate(members):
            setattr(module, PACKED_ATTRIBUTE, (rows, index))
            module.forward = types.MethodType(_packed_forward, module)
    return sum(len(members) for members in groups)


def packed_bytes(model: nn.Module) -> int:
    """Bytes of the packed weights `model`'s linears hold, each shared weight counted once."""
    shared = {id(rows): rows for rows, _ in (getattr(m, PACKED_ATTRIBUTE) for m in model.modules()
                                             if hasattr(m, PACKED_ATTRIBUTE))}
    return sum(rows.weight.numel() * rows.weight.element_size() for rows in shared.values())


def pack_if_room(model: nn.Module) -> int:
    """`pack_linears` when the packed copies take at most half the memory free on the model's device; returns the
    bytes packed so far (0 when nothing was, or could be)."""
    from locret_cli.core.measure import available_memory
    from locret_cli.runtime.offload import is_offloaded

    if is_offloaded(model):
        return 0  # weights are on disk (`--max-memory`): the memory allowed is for them, not for packed copies
    extra = sum(m.weight.numel() * 2 for m in model.modules() if packable(m) and not hasattr(m, PACKED_ATTRIBUTE))
    if extra and extra <= available_memory(next(model.parameters()).device) // 2:
        pack_linears(model)
    return packed_bytes(model)
