"""The bounded KV cache: keys, values, scores and positions of every entry, kept and evicted together.

Each layer holds, per KV head, n entries:
    keys, values: (B, kv_heads, n, head_dim) in the model's dtype, keys already rotated for their position;
    scores:       (B, kv_heads, n) float32, the eviction policy's score of each entry;
    positions:    (B, kv_heads, n) int32, the position each key is currently rotated for;
    origins:      (B, kv_heads, n) int32, the entry's token index in the whole input, which no eviction or
                  renumbering changes (4 bytes per entry and KV head: what citations map back to pages);
    unrotated:    (B, kv_heads, n, head_dim), once keys first move: each key turned back to position 0. Every move
                  turns keys from it, never from their last position, so rounding does not build up over hundreds of
                  evictions. Entries appended since the last move get theirs at the next eviction or move.
Heads select independently, so the same slot may hold different tokens in different heads; every head always holds
the same number of entries, which keeps the model's attention mask valid.

A sliding layer (Gemma 3's, or any layer `config.layer_types` names "sliding_attention") holds the last window - 1
entries it was given, in order, as the model was trained to read them: `LocretCache.slide` drops the older ones,
and no policy evicts there. Its entries stay contiguous, so transformers' own sliding-window mask, sized by the
layer's length, is right for them.

With `kv_bits` 8 or 4, keys, values and unrotated keys are held quantized, each entry and head with its own scale
(`quantized.py`): they are written as codes and read back in the model's dtype, and eviction gathers the codes and
scales as it gathers every other field, so what is kept is never rounded twice.

The tensors are views of buffers (`buffers.py`) allocated once, with room for budget + chunk + question +
answer entries (`LocretCache.reserve`), and written in place, as gpt-fast's static cache is: appending a decoded
token copies one entry, not the whole cache. `LocretCache.evict` is the one place entries are dropped; it gathers
all fields with the same indices.

A fork (`LocretCache.fork`, read once and ask many) shares its parent's buffers. The entries both hold are never
written in place again: whoever would write there first takes a private copy. Past them, the buffer's tail belongs
to the last cache that appended to it; a cache whose appended entries were overwritten that way refuses to go on.
"""

from __future__ import annotations

import copy

import torch

from locret_cli.core.attention.rope import rotate
from locret_cli.core.cache.layer import FIELDS, UNROTATED, CacheState, ScoredLayer
from locret_cli.core.profile_marks import REROTATE, SELECT, mark
from locret_cli.core.transformers_internals import Cache

__all__ = ["FIELDS", "UNROTATED", "LocretCache", "ScoredLayer"]


def _shared(name: str, doc: str) -> property:
    """A field of the cache's `CacheState`, read and written through the cache."""
    return property(lambda cache: getattr(cache.state, name),
                    lambda cache, value: setattr(cache.state, name, value), doc=doc)


class LocretCache(Cache):
    """One ScoredLayer per decoder layer, plus the bookkeeping the engine reports. `windows` gives each layer's
    sliding window, or None where it attends to everything (the default: every layer); a sliding layer reserves
    room for its window and `reserved - budget` more entries, where a global one reserves `reserved`."""

    def __init__(self, num_layers: int, reserved: int = 0, step: int = 256, kv_bits: int = 16,
                 windows: list[int | None] | None = None, budget: int = 0):
        windows = windows or [None] * num_layers
        # fixed for the cache's life (forks copy them): the layers that slide, and the one whose length is `length()`
        self.sliding = [i for i, w in enumerate(windows) if w is not None]
        self.counted = next((i for i, w in enumerate(windows) if w is None), 0)
        self.state = CacheState(kv_bits, step)
        super().__init__(layers=[ScoredLayer(self.state, w, reserved if w is None or not reserved else
                                             w - 1 + max(0, reserved - budget)) for w in windows])
        self.peak_tokens = 0
        self.peak_bytes = 0
        self.peak_kind_bytes: dict[str, int] = {}  # the peak of the global layers' bytes, and of the sliding ones'

    kv_bits = _shared("kv_bits", "Bits per cached key and value: 16, or 8 and 4 quantized (`quantized.py`).")
    dtype = _shared("dtype", "What quantized keys and values are read back in: the model's, once entries came.")
    frequencies = _shared("frequencies", "The inverse frequencies the global layers' keys are rotated with.")
    window_frequencies = _shared("window_frequencies", "The sliding layers' own inverse frequencies (Gemma 3).")
    angles = _shared("angles", "Cos and sin of the positions the global layers' keys move to.")

    def reserve(self, more: int) -> None:
        """Make room in every layer for `more` entries per head past those it holds, before they come, so appending
        them never grows a buffer."""
        for layer in self.layers:
            entries = layer.length + more
            layer.reserved = max(layer.reserved, entries)
            if layer.buffers is not None and layer.buffers.capacity < entries:
                layer._private_copy(entries)

    def fit(self) -> None:
        """Shrink every layer's buffers to the entries it holds, one layer at a time, so that each layer's tensors are
        its whole buffers: a saved context is written from them without a second copy of the cache. A later append
        grows them again."""
        for layer in self.layers:
            if layer.buffers is not None and layer.buffers.capacity > layer.length:
                layer._private_copy(layer.length)

    def own_tails(self, more: int) -> None:
        """Make every layer's buffers this cache's to write its next `more` entries into (a fork copies what it
        shares, a full buffer grows), for a step that writes them in place (`core/answer/compiled_step.py`)."""
        for layer in self.layers:
            layer._own_tail(layer.length + more)

    def stage(self, positions: torch.Tensor, origins: torch.Tensor) -> None:
        """Set the positions and origins (token indices) (T,) of the tokens the next forward pass appends."""
        positions, origins = positions.to(torch.int32), origins.to(torch.int32)
        for layer in self.layers:
            layer.staged_positions, layer.staged_origins = positions, origins

    def fork(self) -> LocretCache:
        """A cache that starts as this one and shares its buffers (see the module docstring)."""
        clone = copy.copy(self)
        clone.layers, clone.state = [], copy.copy(self.state)
        for layer in self.layers:
            twin = copy.copy(layer)
            twin.state = clone.state
            if layer.buffers is not None:
                layer.buffers.shared = max(layer.buffers.shared, layer.length)
            clone.layers.append(twin)
        return clone

    def forget_gradients(self) -> None:
        """Drop the autograd history that a forward with gradients (training a reader) left on the shared buffers
        by writing its entries there, so that the next fork's forward starts a graph of its own."""
        for layer in self.layers:
            for tensor in () if layer.buffers is None else layer.buffers.tensors.values():
                tensor.detach_()

    def stage_scores(self, layer_idx: int, scores: torch.Tensor) -> None:
        """Set the scores (B, kv_heads, T) of the tokens the next forward pass appends to `layer_idx`."""
        self.layers[layer_idx].staged_scores = scores

    def length(self) -> int:
        """Entries per head (the same in every global layer and head; sliding layers hold at most their window)."""
        return self.layers[self.counted].length

    def nbytes(self, sliding: bool | None = None) -> int:
        """Bytes held by every layer, or only by the sliding (True) or the global (False) ones."""
        return sum(layer.nbytes() for layer in self.layers if sliding is None or layer.is_sliding == sliding)

    def note_peak(self) -> None:
        """Record the current size; called after every forward pass, when the cache is at its largest."""
        self.peak_tokens = max(self.peak_tokens, self.length())
        self.peak_bytes = max(self.peak_bytes, self.nbytes())
        for kind, sliding in (("global", False), ("sliding", True)) if self.sliding else ():
            self.peak_kind_bytes[kind] = max(self.peak_kind_bytes.get(kind, 0), self.nbytes(sliding))

    def forget_last(self, count: int) -> None:
        """Forget, in every layer, the last `count` entries."""
        for layer in self.layers:
            layer.forget_last(count)

    def slide(self, renumber: bool = False, slack: int = 0) -> None:
        """Sliding layers keep only their last window - 1 entries, once they hold more than that plus `slack`. With
        `renumber` (compact positions, after an eviction), the kept entries move to the positions just before
        `length()`, where the next token goes."""
        if not self.sliding:
            return
        sliding = [self.layers[i] for i in self.sliding]
        end = self.length() if len(sliding) < len(self.layers) else min(sliding[0].length, sliding[0].window - 1)
        for layer in sliding:
            kept = min(layer.length, layer.window - 1)
            if not renumber and layer.length <= kept + slack:
                continue
            batch, heads = layer.positions.shape[:2]
            keep = torch.arange(layer.length - kept, layer.length, device=layer.positions.device)
            moved = (keep - layer.length + end).to(torch.int32).expand(batch, heads, kept) if renumber else None
            layer.keep(keep.expand(batch, heads, kept), moved)

    def evict(self, layer_idx: int, keep: torch.Tensor, moved_to: torch.Tensor | None = None) -> None:
        """Keep only entries `keep` (B, kv_heads, k), ascending, in one layer: every field of each entry. With
        `moved_to` (B, kv_heads, k), the kept keys are rotated for those positions (compact renumbering)."""
        with mark(SELECT):
            self.layers[layer_idx].keep(keep, moved_to)

    def switch_frequencies(self, new_frequencies: torch.Tensor) -> None:
        """Rotate every cached key, at its position, for `new_frequencies` (longrope, dynamic NTK), turning it from
        its unrotated key. Moves to new positions happen in `evict`."""
        with mark(REROTATE):
            for layer in self.layers:
                if layer.length > 0:
                    unrotated = layer.unrotated_keys(self.frequencies)
                    layer.set("keys", rotate(unrotated, *self.angles(layer.positions, new_frequencies)))
            self.frequencies = new_frequencies
