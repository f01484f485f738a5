"""Retaining heads: one small MLP per attention layer that predicts how much each cache entry will matter.

R(x) = act(x · W1) · W2, where x is the concatenation of the layer's pre-RoPE query, key and value projections of a
token, and the output holds one causal importance score (CIS) per KV head. Their files are read and written by
`models/heads_files.py`.
"""

from __future__ import annotations

import torch
from torch import nn

from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import activation_function, has_activation
from locret_cli.errors import LocretError

DEFAULT_HIDDEN = 1024


class RetainingHead(nn.Module):
    """One layer's head: (B, T, qkv_width) -> (B, T, kv_heads)."""

    def __init__(self, in_features: int, hidden: int, kv_heads: int, activation: str):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = activation_function(activation)
        self.fc2 = nn.Linear(hidden, kv_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class RetainingHeads(nn.Module):
    """All layers' heads, plus the shape and activation they were built for."""

    def __init__(self, shape: ModelShape, hidden: int = DEFAULT_HIDDEN, activation: str = "silu"):
        super().__init__()
        if not has_activation(activation):
            raise LocretError(f"unknown activation {activation!r} for retaining heads")
        self.shape, self.hidden, self.activation = shape, hidden, activation
        self.layers = nn.ModuleList(
            RetainingHead(shape.qkv_width, hidden, shape.kv_heads, activation) for _ in range(shape.layers)
        )

    @classmethod
    def for_model(cls, model, hidden: int = DEFAULT_HIDDEN) -> "RetainingHeads":
        """Fresh heads sized from `model.config`, on the model's device and compute dtype."""
        config = model.config.get_text_config(decoder=True)
        heads = cls(ModelShape.from_config(config), hidden, activation_of(config))
        return heads.to(device=model.device, dtype=compute_dtype(model))

    def score(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Scores of one layer's new tokens.

        q: (B, T, heads * head_dim); k, v: (B, T, kv_heads * head_dim), all pre-RoPE.
        Returns (B, kv_heads, T) float32.
        """
        head = self.layers[layer_idx]
        x = torch.cat((q, k, v), dim=-1).to(head.fc1.weight.dtype)
        return head(x).transpose(1, 2).float()


COMPUTES_IN = "locret_computes_in"  # a model's attribute: the dtype it computes in, where its weights are in another


def compute_dtype(model) -> torch.dtype:
    """The dtype activations run in: the one the model records (`COMPUTES_IN`: bf16 weights computing in fp32,
    `runtime/bf16_weights.py`), else the first floating parameter's (4-bit weights report their compute dtype)."""
    if getattr(model, COMPUTES_IN, None) is not None:
        return getattr(model, COMPUTES_IN)
    quant = getattr(model.config, "quantization_config", None)
    if quant is not None and getattr(quant, "bnb_4bit_compute_dtype", None) is not None:
        return quant.bnb_4bit_compute_dtype
    return next(p.dtype for p in model.parameters() if p.dtype.is_floating_point)


def activation_of(config) -> str:
    """The model's MLP activation, which its heads use too (`hidden_act`; Gemma 3 calls it `hidden_activation`)."""
    return getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None) or "silu"
