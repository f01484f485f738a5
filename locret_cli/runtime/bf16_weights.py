"""bf16 weights, fp32 arithmetic: a bf16 checkpoint on a CPU that computes faster in fp32, in bf16's memory.

`--dtype auto` computes in fp32 where the dtype probe found it faster (`runtime/dtype_probe.py`): CPUs with AVX2 and
no AVX-512 BF16, such as AMD Zen 2 and 3 and most laptops before 2023. A checkpoint stored in bf16 (the Qwen2.5
releases, the folders `locret convert` writes) then sat in memory as fp32, twice its bytes: 6.6 GiB of parameters
for the Qwen2.5-Coder-1.5B, whose file holds 3.3. `keep_bf16_weights` leaves the linear and embedding weights bf16,
as stored, and widens them to fp32 where they are used; every other parameter and buffer, and every activation, is
fp32. A bf16 number widens to fp32 exactly, so the model computes what the fp32 model computes:
- a chunk of rows widens each weight and multiplies with torch's fp32 product: the same outputs bit for bit, the
  widening a few per cent of the product's time;
- one row (every decode step), and up to `native_rows.QUESTION_ROWS` rows (a question after the read, for which
  widening every weight took longer than the product), go to locret's kernel (`runtime/native_rows.py`), which
  reads the bf16 weights as stored and sums the products in fp32; its outputs differ from torch's fp32 product only
  by the order of the sums (torch has no product of fp32 rows with bf16 weights, and widening every weight at every
  step made decoding several times slower). Without the kernel (no compiler, no AVX2, `LOCRET_NATIVE_ROWS=0`) the
  step widens too;
- an embedding looks up bf16 rows and widens them.
`LOCRET_BF16_WEIGHTS=0` widens every weight when it loads. Only plain `nn.Linear` and `nn.Embedding` modules keep
bf16 weights (a scaled embedding such as Gemma 3's multiplies in its weight's dtype, so it is widened whole); the
model records its compute dtype (`core.heads.compute_dtype`).
"""

from __future__ import annotations

import os
import types

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.heads import COMPUTES_IN
from locret_cli.core.profile_marks import ROWS_KERNEL, WIDEN, mark
from locret_cli.runtime.native_rows import rows_product, widening_rows


def applies(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether a model computing in `dtype` on `device` keeps bf16 weights as bf16: fp32 on the CPU, unless
    `LOCRET_BF16_WEIGHTS=0` (the weights then widen to fp32 when they load, as the fp32 model holds them)."""
    return device.type == "cpu" and dtype == torch.float32 and os.environ.get("LOCRET_BF16_WEIGHTS") != "0"


def _linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float32 and not (torch.is_grad_enabled() and x.requires_grad):
        with mark(ROWS_KERNEL):
            out = rows_product(x, self.weight, self.bias, most=widening_rows(x))
        if out is not None:
            return out
    with mark(WIDEN):
        weight = widened(self.weight, x.dtype)
    return F.linear(x, weight, self.bias)


_scratch: dict[torch.dtype, torch.Tensor] = {}  # the buffer weights widen into, per dtype, as large as the largest


def widened(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`weight` in `dtype`. Without gradients it is written into one buffer that every product reuses (a weight's
    product is done before the next widens): a fresh tensor of a weight's size for every product of every chunk
    cost more in page faults than the widening itself. With gradients, a tensor of its own (backward keeps it)."""
    if torch.is_grad_enabled() and weight.requires_grad or weight.device.type != "cpu":
        return weight.to(dtype)
    return scratch(weight.numel(), dtype).view(weight.shape).copy_(weight)


def scratch(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """The first `numel` elements of the one buffer of `dtype` that weights widen into (`widened`), grown as needed
    (one per dtype: a model mixing int8 weights widened to fp32 with 4-bit ones widened to bf16 keeps both)."""
    if dtype not in _scratch or _scratch[dtype].numel() < numel:
        _scratch[dtype] = torch.empty(numel, dtype=dtype)
    return _scratch[dtype][:numel]


def _embedding_forward(self: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    return nn.Embedding.forward(self, ids).float()


FORWARDS = {nn.Linear: _linear_forward, nn.Embedding: _embedding_forward}


def keep_bf16_weights(model: nn.Module) -> int:
    """Make `model`, loaded in bf16 on the CPU, compute in fp32 with its plain linear and embedding weights left
    bf16 (a tied one stays one tensor, and stays bf16 only where no other kind of module uses it); everything else
    becomes fp32. Returns the bytes kept bf16."""
    plain = [m for m in model.modules() if type(m) in FORWARDS and m.weight.dtype == torch.bfloat16]
    plain_ids = {id(m) for m in plain}
    others = {id(p) for m in model.modules() if id(m) not in plain_ids for p in m.parameters(recurse=False)}
    kept = {id(m.weight): m.weight for m in plain if id(m.weight) not in others}  # a tied weight, used by both
    for module in plain:
        if id(module.weight) in kept:
            module.forward = types.MethodType(FORWARDS[type(module)], module)
    with torch.no_grad():
        for module in model.modules():
            for _, param in module.named_parameters(recurse=False):
                if id(param) not in kept and param.is_floating_point() and param.dtype != torch.float32:
                    param.data = param.data.float()
            for name, buffer in module.named_buffers(recurse=False):
                if buffer.is_floating_point() and buffer.dtype != torch.float32:
                    module._buffers[name] = buffer.float()
    setattr(model, COMPUTES_IN, torch.float32)
    return sum(w.numel() * w.element_size() for w in kept.values())


def keeps_bf16_weights(model: nn.Module) -> bool:
    return getattr(model, COMPUTES_IN, None) == torch.float32 and any(
        p.dtype == torch.bfloat16 for p in model.parameters())
