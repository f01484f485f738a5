"""The reference attention that the cache's attention, and the attention a question pays it (FINCH), are checked
against."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked(query, key, value):
    """The reference: SDPA with the chunk's mask (causal among the last T entries, every earlier entry visible)."""
    length, entries = query.shape[2], key.shape[2]
    mask = torch.ones(length, entries, dtype=torch.bool).tril(diagonal=entries - length)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)


def reference_finch_scores(model, ids: list[int], question: list[int]) -> list[torch.Tensor]:
    """Per layer, (kv_heads, n): eager attention of `question`'s rows over `ids`' n columns, each row times the
    entries it sees, averaged over rows and summed over each KV head's query group."""
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids + question]), output_attentions=True)
    finally:
        model.set_attn_implementation("sdpa")
    n, q = len(ids), len(question)
    kv_heads = model.config.num_key_value_heads
    scores = []
    for attention in out.attentions:  # (1, heads, n + q, n + q)
        rows = attention[0, :, n:, :n] * torch.arange(n + 1, n + q + 1).view(1, q, 1)
        scores.append(rows.mean(dim=1).view(kv_heads, -1, n).sum(dim=1))
    return scores
