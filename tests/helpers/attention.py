"""The reference attention that the cache's attention is checked against."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked(query, key, value):
    """The reference: SDPA with the chunk's mask (causal among the last T entries, every earlier entry visible)."""
    length, entries = query.shape[2], key.shape[2]
    mask = torch.ones(length, entries, dtype=torch.bool).tril(diagonal=entries - length)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
