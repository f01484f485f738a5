"""Which kept entries an answer drew on: the attention its tokens paid to each, summed over heads and layers."""

from __future__ import annotations

import torch

from locret_cli.core.cache.bounded import LocretCache
from locret_cli.inputs.sources import Source, SourceMap, top_sources, units_weighted

SINK_TOKENS = 4  # the document's first tokens draw attention whatever the answer (sinks): they are never credited


class AttentionTally:
    """Adds up, per layer and KV head, the attention the answer pays to the first `entries` cache entries (the
    document's). Observe it with `probe.observe_attention` while answering: the question's last position predicts
    the first answer token, and each decode step's query the next one.

    While decoding, `observe` only keeps each step's last query row and how many entries it saw; `sources` then
    scores all the rows of a layer in one matrix product, against the keys the answer ended with (entries are
    appended, never moved, while answering). That keeps the cost per decoded token to a copy."""

    def __init__(self, layers: int, entries: int):
        self.entries = entries
        self.rows: list[list[tuple[torch.Tensor, int]]] = [[] for _ in range(layers)]  # (query (B, heads, D), n)
        self.scaling = 1.0

    def observe(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, scaling: float) -> None:
        """query (B, heads, T, D) and key (B, kv_heads, n, D), post-RoPE, as the model attends with them."""
        self.rows[layer_idx].append((query[:, :, -1].clone(), key.shape[2]))
        self.scaling = scaling

    def received(self, layer_idx: int, keys: torch.Tensor) -> torch.Tensor | None:
        """Attention each of the first `entries` entries of a layer received, summed over the answer's queries and
        each KV head's query group. keys (B, kv_heads, N, D): the layer's keys once the answer is done. Returns
        (B, kv_heads, entries) float32, or None if the layer was never observed."""
        rows = self.rows[layer_idx]
        if not rows:
            return None
        query = torch.stack([q for q, _ in rows], dim=2)  # (B, heads, steps, D)
        batch, heads, steps, dim = query.shape
        kv_heads, total = keys.shape[1], keys.shape[2]
        grouped = query.reshape(batch, kv_heads, heads // kv_heads * steps, dim)  # a KV head's query group
        logits = (grouped @ keys.transpose(-1, -2)).float() * self.scaling  # (B, kv_heads, group * steps, N)
        seen = torch.tensor([n for _, n in rows], device=keys.device).repeat(heads // kv_heads)
        logits = logits.masked_fill(torch.arange(total, device=keys.device) >= seen[:, None], float("-inf"))
        return logits.softmax(dim=-1)[..., : self.entries].sum(dim=2)

    def origin_weights(self, reader: LocretCache, answerer: LocretCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Each kept document entry's token index and the attention it received, over every layer and KV head:
        two (n,) tensors. `reader` holds the document's entries; `answerer`, its fork, the keys the answer attended
        to. Sliding layers hold only the document's last tokens, and drop some while answering: only global layers
        count where a model has both."""
        origins, weights = [], []
        every = all(layer.is_sliding for layer in reader.layers)
        for layer_idx, (read, answered) in enumerate(zip(reader.layers, answerer.layers)):
            if read.is_sliding and not every:
                continue
            received = self.received(layer_idx, answered.keys)
            if received is not None:
                origins.append(read.origins[..., : self.entries].flatten())
                weights.append(received.flatten())
        if not origins:
            return torch.zeros(0, dtype=torch.int64), torch.zeros(0)
        return torch.cat(origins), torch.cat(weights)

    def sources(self, reader: LocretCache, answerer: LocretCache, source_map: SourceMap, count: int) -> list[Source]:
        """The `count` pages or line ranges that received the most attention, as shares of what the document
        received (`origin_weights`), leaving out the document's first SINK_TOKENS tokens (the prompt's head is not
        the document's either)."""
        origins, weights = self.origin_weights(reader, answerer)
        if not len(origins):
            return []
        if len(source_map):
            weights = weights.masked_fill(origins < source_map.starts[0] + SINK_TOKENS, 0.0)
        return top_sources(source_map, units_weighted(source_map, origins, weights), count)


def kept_per_unit(cache: LocretCache, source_map: SourceMap, entries: int) -> torch.Tensor:
    """How many of the first `entries` entries of each head came from each unit, averaged over layers and KV heads:
    (units,) float64. A unit read whole into one head shows its token count."""
    origins = torch.cat([layer.origins[..., :entries].flatten() for layer in cache.layers])
    heads = sum(layer.origins.shape[0] * layer.origins.shape[1] for layer in cache.layers)
    return units_weighted(source_map, origins, torch.ones_like(origins, dtype=torch.float64)) / heads
