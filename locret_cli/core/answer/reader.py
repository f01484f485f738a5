"""The reader: low-rank updates (LoRA) to a model's linear projections, in force only while an answer is read.

A small model reads a cache of scattered kept entries poorly (docs/reader.md). The reader adapts how the question and
the answer read that cache, and nothing else: the document is read by the base model, so the retaining heads, the
kept entries, `.locret` files and every policy are the same with it and without it.

Each adapted linear y = W x gains B A x · alpha / rank, with A (rank, in) and B (out, rank); B starts at zero, so a
fresh reader changes nothing. The updates are added by forward hooks that `reading_with` registers and removes in
`finally`, rather than by wrapping the model's modules: the model the engine packs, offloads or quantizes stays the
same object, and a linear of any kind (bf16, int8, 4-bit) that has `in_features` and `out_features` can be adapted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.transformers_internals import ADAPTED_LINEARS


def adapted_linears(model: nn.Module, targets: Sequence[str] = ADAPTED_LINEARS) -> dict[str, nn.Module]:
    """The decoder's linears a reader adapts, by module name: those whose last name is one of `targets`."""
    return {name: module for name, module in model.named_modules()
            if name.rsplit(".", 1)[-1] in targets and hasattr(module, "in_features") and hasattr(module, "out_features")}


class ReaderAdapter(nn.Module):
    """The low-rank factors of every adapted linear of one model, by the model's module names (`names`, sorted)."""

    def __init__(self, shapes: dict[str, tuple[int, int]], rank: int, alpha: float):
        super().__init__()
        self.names, self.rank, self.alpha = sorted(shapes), rank, alpha
        self.source = "untrained"  # what answers name it by: a directory, or where it was shipped
        self.down = nn.ParameterList(nn.Parameter(torch.empty(rank, shapes[n][0])) for n in self.names)
        self.up = nn.ParameterList(nn.Parameter(torch.zeros(shapes[n][1], rank)) for n in self.names)
        for a in self.down:
            nn.init.kaiming_uniform_(a, a=5 ** 0.5)

    @classmethod
    def for_model(cls, model: nn.Module, rank: int = 8, alpha: float = 16.0,
                  targets: Sequence[str] = ADAPTED_LINEARS) -> ReaderAdapter:
        """A fresh reader (no effect until trained) for `model`'s linears named in `targets`."""
        linears = adapted_linears(model, targets)
        if not linears:
            raise ValueError(f"the model has no linear named {', '.join(targets)} to adapt")
        return cls({name: (m.in_features, m.out_features) for name, m in linears.items()}, rank, alpha)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def tensors(self) -> dict[str, torch.Tensor]:
        """The factors by name, as saved: `{module}.lora_A` (rank, in) and `{module}.lora_B` (out, rank)."""
        out = {}
        for name, a, b in zip(self.names, self.down, self.up):
            out[f"{name}.lora_A"], out[f"{name}.lora_B"] = a.detach(), b.detach()
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], rank: int, alpha: float) -> ReaderAdapter:
        names = [key.removesuffix(".lora_A") for key in tensors if key.endswith(".lora_A")]
        reader = cls({n: (tensors[f"{n}.lora_A"].shape[1], tensors[f"{n}.lora_B"].shape[0]) for n in names}, rank,
                     alpha)
        with torch.no_grad():
            for name, a, b in zip(names, reader.down, reader.up):
                a.copy_(tensors[f"{name}.lora_A"])
                b.copy_(tensors[f"{name}.lora_B"])
        return reader

    def update(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The `index`-th linear's low-rank update for input `x` (..., in), computed in the factors' dtype."""
        a, b = self.down[index], self.up[index]
        return F.linear(F.linear(x.to(a.dtype), a), b) * self.scale


@contextmanager
def reading_with(model: nn.Module, reader: ReaderAdapter | None) -> Iterator[None]:
    """A context in which `model`'s adapted linears add `reader`'s updates to their outputs; nothing when `reader` is
    None. Raises ValueError when the model lacks a linear the reader adapts, or its shape differs."""
    if reader is None:
        yield
        return
    linears = adapted_linears(model, {name.rsplit(".", 1)[-1] for name in reader.names})
    hooks = []
    try:
        for index, name in enumerate(reader.names):
            module = linears.get(name)
            shape = (reader.down[index].shape[1], reader.up[index].shape[0])
            if module is None or (module.in_features, module.out_features) != shape:
                raise ValueError(f"the reader adapts {name} {shape[0]}→{shape[1]}, which this model does not have")
            hooks.append(module.register_forward_hook(_adds(reader, index)))
        yield
    finally:
        for hook in hooks:
            hook.remove()


def _adds(reader: ReaderAdapter, index: int):
    def hook(module, inputs, output):
        return output + reader.update(index, inputs[0]).to(output.dtype)

    return hook
