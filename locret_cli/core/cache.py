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

With `kv_bits` 8 or 4, keys, values and unrotated keys are held quantized, each entry and head with its own scale
(`kv_quant.py`): they are written as codes and read back in the model's dtype, and eviction gathers the codes and
scales as it gathers every other field, so what is kept is never rounded twice.

The tensors are views of buffers (`cache_buffers.py`) allocated once, with room for budget + chunk + question +
answer entries (`LocretCache.reserve`), and written in place, as gpt-fast's static cache is: appending a decoded
token copies one entry, not the whole cache. `LocretCache.evict` is the one place entries are dropped; it gathers
all fields with the same indices.

A fork (`LocretCache.fork`, read once and ask many) shares its parent's buffers. The entries both hold are never
written in place again: whoever would write there first takes a private copy. Past them, the buffer's tail belongs
to the last cache that appended to it; a cache whose appended entries were overwritten that way refuses to go on.
"""

from __future__ import annotations

import copy
import functools
import inspect

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from locret_cli.core.cache_buffers import Buffers
from locret_cli.core.kv_quant import decode, encode, parts
from locret_cli.core.profile_marks import CACHE_UPDATE, REROTATE, SELECT, mark
from locret_cli.core.rope import AngleTable, rotate
from locret_cli.errors import LocretError

FIELDS = ("keys", "values", "scores", "positions", "origins")  # every entry's; a saved context holds these
UNROTATED = "unrotated"  # added once keys first move


def _entries(name: str) -> property:
    def view(layer: "ScoredLayer") -> torch.Tensor | None:
        return None if layer.buffers is None else layer.field(name)

    return property(view, doc=f"The {name} of the layer's entries: a view of its buffer (dequantized, in 8 or 4 "
                              "bits), or None before the first update.")


def cache_kwargs(module: torch.nn.Module, cache: Cache) -> dict[str, Cache]:
    """The keyword argument that hands `cache` to `module`'s forward (a model or a decoder layer): `cache` where the
    forward takes it (transformers 5.24 on), else `past_key_values`. 5.24 still accepts the old name, but warns
    (FutureWarning) on stderr at the first forward of each process."""
    return {_cache_keyword(type(module)): cache}


@functools.cache
def _cache_keyword(module_class: type) -> str:
    return "cache" if "cache" in inspect.signature(module_class.forward).parameters else "past_key_values"


class ScoredLayer(CacheLayerMixin):
    """One decoder layer's entries, as views of its Buffers; see the module docstring."""

    is_sliding = False
    is_compileable = False
    keys, values, scores, positions, origins, unrotated = (_entries(name) for name in (*FIELDS, UNROTATED))

    def __init__(self, cache: "LocretCache"):  # CacheLayerMixin.__init__ would assign keys and values
        self.cache, self.buffers, self.length, self.is_initialized = cache, None, 0, False
        self.anchored = 0  # the first `anchored` entries have their unrotated key
        self.staged_positions = self.staged_origins = self.staged_scores = None

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every per-entry tensor as stored, by name (a quantized field's parts apart; empty before the first
        update)."""
        return {} if self.buffers is None else {name: t.narrow(2, 0, self.length)
                                                 for name, t in self.buffers.tensors.items()}

    def field(self, name: str, start: int = 0) -> torch.Tensor:
        """Field `name` of entries start.. (B, kv_heads, n - start[, head_dim]): a view, or dequantized."""
        bits = self.cache.kv_bits
        stored = {part: self.buffers.tensors[part].narrow(2, start, self.length - start) for part in parts(name, bits)}
        return decode(name, stored, bits, self.cache.dtype)

    def unrotated_keys(self, frequencies: torch.Tensor) -> torch.Tensor:
        """Give every entry its unrotated key, turning back those appended since the last call with `frequencies`
        (rotary_dim / 2,), the ones they were rotated with; returns them all (B, kv_heads, n, head_dim)."""
        if self.anchored < self.length:
            cos, sin = self.cache.angles(self.positions[:, :, self.anchored:], frequencies)
            self._write({UNROTATED: rotate(self.field("keys", self.anchored), cos, -sin)}, start=self.anchored)
            self.anchored = self.length
        return self.unrotated

    def nbytes(self) -> int:
        """Bytes of the entries held (the room reserved past them is not counted)."""
        return 0 if self.buffers is None else self.length * self.buffers.entry_bytes

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.is_initialized = True

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Append T new entries (key_states: (B, kv_heads, T, head_dim)) with their staged positions, origins and
        scores; returns the keys and values of all entries."""
        with mark(CACHE_UPDATE):
            new = key_states.shape[2]
            scores, self.staged_scores = self.staged_scores, None
            self.cache.dtype = key_states.dtype
            stored = {**self.cache.encoded("keys", key_states), **self.cache.encoded("values", value_states)}
            if self.buffers is None:
                self.is_initialized = True
                self.buffers = Buffers.allocate(self._first_entries(stored, scores), self.cache.room_for(new, 0))
            self._own_tail(self.length + new)
            buffers, start = self.buffers.tensors, self.length
            for part, t in stored.items():
                buffers[part].narrow(2, start, new).copy_(t)
            buffers["positions"].narrow(2, start, new).copy_(self.staged_positions.view(1, 1, new))
            buffers["origins"].narrow(2, start, new).copy_(self.staged_origins.view(1, 1, new))
            if scores is None:
                buffers["scores"].narrow(2, start, new).zero_()
            else:
                buffers["scores"].narrow(2, start, new).copy_(scores)
            self.length += new
            return self.keys, self.values

    def _first_entries(self, stored: dict[str, torch.Tensor], scores) -> dict[str, torch.Tensor]:
        """The five fields of the first appended entries (keys and values as stored), to allocate buffers like."""
        batch, heads, new = stored["keys"].shape[:3]
        index = self.staged_positions.view(1, 1, new).expand(batch, heads, new)
        if scores is None:
            scores = index.new_empty(batch, heads, new, dtype=torch.float32)
        return {**stored, "scores": scores, "positions": index, "origins": index}

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        """Hold exactly `tensors` (the five, as `tensors()` returns them): a saved context's entries."""
        self.length, self.anchored = tensors["keys"].shape[2], 0
        self.buffers = Buffers.allocate(tensors, self.cache.room_for(self.length, 0))
        self.is_initialized = True
        self._write(tensors)

    def keep(self, keep: torch.Tensor, moved_to: torch.Tensor | None = None) -> None:
        """Keep only entries `keep` (B, kv_heads, k), in that order (gathered first, then written over the front);
        with `moved_to` (B, kv_heads, k), rotate the kept keys for those positions, turning them from their
        unrotated keys. Once keys have moved, the entries appended since get their unrotated keys first."""
        if self.anchored or moved_to is not None:
            self.unrotated_keys(self.cache.frequencies)
        fields = self.tensors()
        if moved_to is not None:  # the keys are made again from the unrotated ones, and the positions are given
            for name in (*parts("keys", self.cache.kv_bits), "positions"):
                del fields[name]
        gathered = {name: t.gather(2, keep if t.dim() == 3 else keep.unsqueeze(-1).expand(-1, -1, -1, t.shape[-1]))
                    for name, t in fields.items()}
        if moved_to is not None:
            gathered["positions"] = moved_to.to(self.positions)
            with mark(REROTATE):
                cos, sin = self.cache.angles(gathered["positions"], self.cache.frequencies)
                unrotated = decode(UNROTATED, gathered, self.cache.kv_bits, self.cache.dtype)
                gathered.update(self.cache.encoded("keys", rotate(unrotated, cos, sin)))
        self.length = keep.shape[-1]
        self.anchored = min(self.anchored, self.length)
        self._write(gathered)

    def truncate(self, length: int) -> None:
        """Forget the entries past the first `length` (a question read only to score the document's entries)."""
        self.length = min(self.length, length)
        self.anchored = min(self.anchored, self.length)

    def set(self, name: str, tensor: torch.Tensor) -> None:
        """Replace one field of every entry (scores rescored, keys re-rotated, positions renumbered)."""
        self._write({name: tensor})

    def _write(self, tensors: dict[str, torch.Tensor], start: int = 0) -> None:
        """Write entries start.. of some fields (B, kv_heads, k[, head_dim]), as values or as stored parts, first
        taking a private copy if entries are shared."""
        if self.buffers.shared > 0:
            self._private_copy(self.buffers.capacity)
        for name, t in tensors.items():
            for part, stored in self.cache.encoded(name, t).items():
                if part not in self.buffers.tensors:
                    self.buffers.add(part, stored)
                self.buffers.tensors[part].narrow(2, start, stored.shape[2]).copy_(stored)

    def _own_tail(self, needed: int) -> None:
        """Make this cache the one that may write entries length..needed-1, growing or copying if it must."""
        buffers = self.buffers
        if buffers.tail_owner is not self.cache and self.length > buffers.shared:
            raise LocretError("this cache's last entries were overwritten by another fork of the same reading; "
                              "fork the reading again")
        if self.length < buffers.shared or needed > buffers.capacity:
            self._private_copy(self.cache.room_for(needed, buffers.capacity))
        self.buffers.tail_owner = self.cache

    def _private_copy(self, capacity: int) -> None:
        """Move this layer's entries into buffers of its own, `capacity` long."""
        current = self.tensors()
        self.buffers = Buffers.allocate(current, capacity)
        self.buffers.tail_owner = self.cache
        for name, t in current.items():
            self.buffers.tensors[name][:, :, : self.length] = t


class LocretCache(Cache):
    """One ScoredLayer per decoder layer, plus the bookkeeping the engine reports."""

    def __init__(self, num_layers: int, reserved: int = 0, step: int = 256, kv_bits: int = 16):
        super().__init__(layers=[ScoredLayer(self) for _ in range(num_layers)])
        self.kv_bits = kv_bits  # 16: keys and values as the model makes them; 8 or 4: quantized (`kv_quant.py`)
        self.dtype: torch.dtype | None = None  # what quantized keys and values are read back in: the model's
        self.reserved = reserved  # entries each layer's buffers may grow to before they are needed
        self.step = step  # past the reservation, buffers grow by at least this many entries (a chunk)
        self.frequencies: torch.Tensor | None = None  # inverse frequencies the cached keys are rotated with
        self.angles = AngleTable()  # cos and sin of the positions keys move to and from
        self.peak_tokens = 0
        self.peak_bytes = 0

    def encoded(self, name: str, values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Field `name`'s `values` as stored: quantized when this cache holds it in 8 or 4 bits and they are not
        codes already (gathered, or loaded from a file; scales pass through `encode` as they are)."""
        return encode(name, values, self.kv_bits) if values.is_floating_point() else {name: values}

    def room_for(self, needed: int, capacity: int) -> int:
        """The capacity to allocate for `needed` entries, growing from `capacity`: within the reservation, twice what
        is needed but never past it; beyond it (a policy that never evicts), one `step` more, so a full cache holds
        at most one chunk of room it does not use."""
        if needed <= self.reserved:
            return max(needed, capacity, min(self.reserved, 2 * needed))
        return max(needed, capacity + self.step)

    def reserve(self, entries: int) -> None:
        """Make room for `entries` per head before they come, so appending them never grows a buffer."""
        self.reserved = max(self.reserved, entries)
        for layer in self.layers:
            if layer.buffers is not None and layer.buffers.capacity < entries:
                layer._private_copy(entries)

    def stage(self, positions: torch.Tensor, origins: torch.Tensor) -> None:
        """Set the positions and origins (token indices) (T,) of the tokens the next forward pass appends."""
        positions, origins = positions.to(torch.int32), origins.to(torch.int32)
        for layer in self.layers:
            layer.staged_positions, layer.staged_origins = positions, origins

    def fork(self) -> "LocretCache":
        """A cache that starts as this one and shares its buffers (see the module docstring)."""
        clone = copy.copy(self)
        clone.layers = []
        for layer in self.layers:
            twin = copy.copy(layer)
            twin.cache = clone
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
        """Entries per head (the same in every layer and head)."""
        return self.layers[0].length

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.layers)

    def note_peak(self) -> None:
        """Record the current size; called after every forward pass, when the cache is at its largest."""
        self.peak_tokens = max(self.peak_tokens, self.length())
        self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def truncate(self, length: int) -> None:
        """Forget, in every layer, the entries past the first `length`."""
        for layer in self.layers:
            layer.truncate(length)

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
