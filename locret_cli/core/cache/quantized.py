"""Cache keys and values held in 8 or 4 bits (`ReadSettings.kv_bits`): each entry of each KV head is quantized on its
own, with its own scale, as it is written, and dequantized whenever attention reads it.

A quantized field is stored as parts, each (B, kv_heads, n[, ...]) so that eviction gathers and forks share them as
they do every other field:
    8 bits: `name` int8 (.., head_dim), symmetric, and `name_scale` float32: value = code × scale;
    4 bits: `name` uint8 (.., head_dim / 2), two codes a byte (low nibble first), asymmetric, with `name_scale` and
            `name_min` float32: value = code × scale + min.
Scores, positions and origins are never quantized. Per entry is what Locret's eviction needs: an entry and its
scales are kept or dropped together, and no entry's rounding depends on another's.
"""

from __future__ import annotations

import torch

QUANTIZED = ("keys", "values", "unrotated")  # the fields held in kv_bits; the rest stay exact
SCALE, MINIMUM = "_scale", "_min"


def parts(name: str, bits: int) -> tuple[str, ...]:
    """The stored parts of field `name` at `bits`: the field itself, then its scales."""
    if bits == 16 or name not in QUANTIZED:
        return (name,)
    return (name, name + SCALE) if bits == 8 else (name, name + SCALE, name + MINIMUM)


def encode(name: str, values: torch.Tensor, bits: int) -> dict[str, torch.Tensor]:
    """The stored parts of field `name` holding `values` (B, kv_heads, n, head_dim)."""
    if bits == 16 or name not in QUANTIZED:
        return {name: values}
    x = values.float()
    if bits == 8:
        scale = x.abs().amax(dim=-1) / 127
        codes = torch.round(x / _nonzero(scale)[..., None]).clamp(-127, 127).to(torch.int8)
        return {name: codes, name + SCALE: scale}
    low, high = x.amin(dim=-1), x.amax(dim=-1)
    scale = (high - low) / 15
    codes = torch.round((x - low[..., None]) / _nonzero(scale)[..., None]).clamp(0, 15).to(torch.uint8)
    return {name: codes[..., 0::2] | (codes[..., 1::2] << 4), name + SCALE: scale, name + MINIMUM: low}


def decode(name: str, stored: dict[str, torch.Tensor], bits: int, dtype: torch.dtype) -> torch.Tensor:
    """Field `name` (B, kv_heads, n, head_dim) in `dtype`, from its stored parts (those `encode` returns)."""
    codes = stored[name]
    if bits == 16 or name not in QUANTIZED:
        return codes
    scale = stored[name + SCALE][..., None]
    if bits == 8:
        return (codes.float() * scale).to(dtype)
    pairs = torch.stack((codes & 15, codes >> 4), dim=-1).flatten(-2)  # (.., head_dim)
    return (pairs.float() * scale + stored[name + MINIMUM][..., None]).to(dtype)


def entry_bytes(head_dim: int, element: int, bits: int) -> int:
    """Bytes of one entry's key (or value) of one KV head, scales included."""
    if bits == 16:
        return head_dim * element
    return head_dim + 4 if bits == 8 else head_dim // 2 + 8


def _nonzero(scale: torch.Tensor) -> torch.Tensor:
    return scale.clamp(min=torch.finfo(torch.float32).tiny)
