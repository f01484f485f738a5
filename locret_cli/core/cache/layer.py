"""One decoder layer's cached entries (`ScoredLayer`), as views of its preallocated buffers, and what the layers of
one cache share (`CacheState`); `bounded.py` says what each field holds, how forks share buffers, and how sliding
layers keep their window."""

from __future__ import annotations

import torch

from locret_cli.core.attention.rope import AngleTable, rotate
from locret_cli.core.cache.buffers import Buffers
from locret_cli.core.cache.quantized import decode, encode, parts
from locret_cli.core.profile_marks import CACHE_UPDATE, REROTATE, mark
from locret_cli.core.transformers_internals import CacheLayerMixin
from locret_cli.errors import LocretError

FIELDS = ("keys", "values", "scores", "positions", "origins")  # every entry's; a saved context holds these
UNROTATED = "unrotated"  # added once keys first move


class CacheState:
    """What the layers of one cache share: how entries are stored (`kv_bits`: 16 as the model makes them, 8 or 4
    quantized by `quantized.py`; `dtype`, what quantized ones are read back in), how far buffers grow past their
    reservation (`step`, a chunk), and the rotations keys are turned with. Each fork of a cache has its own copy (a
    fork may switch frequencies), which also marks the buffer tails that fork owns."""

    def __init__(self, kv_bits: int = 16, step: int = 256):
        self.kv_bits, self.step = kv_bits, step
        self.dtype: torch.dtype | None = None
        self.frequencies: torch.Tensor | None = None  # inverse frequencies the global layers' keys are rotated with
        self.window_frequencies: torch.Tensor | None = None  # the sliding layers' (Gemma 3 has a set of their own)
        self.angles, self.window_angles = AngleTable(), AngleTable()  # cos and sin of the positions keys move to

    def encoded(self, name: str, values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Field `name`'s `values` as stored: quantized when the cache holds it in 8 or 4 bits and they are not
        codes already (gathered, or loaded from a file; scales pass through `encode` as they are)."""
        return encode(name, values, self.kv_bits) if values.is_floating_point() else {name: values}


def _entries(name: str) -> property:
    def view(layer: ScoredLayer) -> torch.Tensor | None:
        return None if layer.buffers is None else layer.field(name)

    return property(view, doc=f"The {name} of the layer's entries: a view of its buffer (dequantized, in 8 or 4 "
                              "bits), or None before the first update.")


class ScoredLayer(CacheLayerMixin):
    """One decoder layer's entries, as views of its Buffers; see the module docstring."""

    is_compileable = False
    keys, values, scores, positions, origins, unrotated = (_entries(name) for name in (*FIELDS, UNROTATED))

    def __init__(self, state: CacheState, window: int | None = None, reserved: int = 0):
        # CacheLayerMixin.__init__ would assign keys and values
        self.state, self.buffers, self.length, self.is_initialized = state, None, 0, False
        self.window = window  # a sliding layer's window (it holds the last window - 1 entries), else None
        self.reserved = reserved  # entries its buffers may grow to before they are needed
        self.anchored = 0  # the first `anchored` entries have their unrotated key
        self.staged_positions = self.staged_origins = self.staged_scores = None

    @property
    def is_sliding(self) -> bool:
        return self.window is not None

    @property
    def frequencies(self) -> torch.Tensor | None:
        """The inverse frequencies this layer's keys are rotated with (sliding layers may have their own)."""
        return self.state.window_frequencies if self.is_sliding else self.state.frequencies

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every per-entry tensor as stored, by name (a quantized field's parts apart; empty before the first
        update)."""
        return {} if self.buffers is None else {name: t.narrow(2, 0, self.length)
                                                 for name, t in self.buffers.tensors.items()}

    def field(self, name: str, start: int = 0) -> torch.Tensor:
        """Field `name` of entries start.. (B, kv_heads, n - start[, head_dim]): a view, or dequantized."""
        bits = self.state.kv_bits
        stored = {part: self.buffers.tensors[part].narrow(2, start, self.length - start) for part in parts(name, bits)}
        return decode(name, stored, bits, self.state.dtype)

    def unrotated_keys(self, frequencies: torch.Tensor) -> torch.Tensor:
        """Give every entry its unrotated key, turning back those appended since the last call with `frequencies`
        (rotary_dim / 2,), the ones they were rotated with; returns them all (B, kv_heads, n, head_dim)."""
        if self.anchored < self.length:
            cos, sin = self._angles(self.positions[:, :, self.anchored:], frequencies)
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
            self.state.dtype = key_states.dtype
            stored = {**self.state.encoded("keys", key_states), **self.state.encoded("values", value_states)}
            if self.buffers is None:
                self.is_initialized = True
                self.buffers = Buffers.allocate(self._first_entries(stored, scores), self.room_for(new, 0))
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
        self.buffers = Buffers.allocate(tensors, self.room_for(self.length, 0))
        self.is_initialized = True
        self._write(tensors)

    def keep(self, keep: torch.Tensor, moved_to: torch.Tensor | None = None) -> None:
        """Keep only entries `keep` (B, kv_heads, k), in that order (gathered first, then written over the front);
        with `moved_to` (B, kv_heads, k), rotate the kept keys for those positions, turning them from their
        unrotated keys. Once keys have moved, the entries appended since get their unrotated keys first."""
        if self.anchored or moved_to is not None:
            self.unrotated_keys(self.frequencies)
        names = set(self.buffers.tensors)
        if moved_to is not None:  # the keys are made again from the unrotated ones, and the positions are given
            names -= {*parts("keys", self.state.kv_bits), "positions"}
        gathered = self._gathered(keep, names)
        if moved_to is not None:
            gathered["positions"] = moved_to.to(self.positions)
            with mark(REROTATE):
                cos, sin = self._angles(gathered["positions"], self.frequencies)
                unrotated = decode(UNROTATED, gathered, self.state.kv_bits, self.state.dtype)
                gathered.update(self.state.encoded("keys", rotate(unrotated, cos, sin)))
        self.length = keep.shape[-1]
        self.anchored = min(self.anchored, self.length)
        self._write(gathered)

    def _gathered(self, keep: torch.Tensor, names: set[str]) -> dict[str, torch.Tensor]:
        """Fields `names`' entries `keep` (B, kv_heads, k), as stored, each (B, kv_heads, k[, ...]). One index_select
        over the buffer with its heads laid end to end gives what `gather` along the entries does, much faster for
        keys and values on a CPU, where `gather` indexes every element
        (docs/measurements/what-makes-it-fast.md, item 7)."""
        batch, heads, kept = keep.shape
        capacity = self.buffers.capacity
        head_starts = torch.arange(0, batch * heads * capacity, capacity, device=keep.device).view(batch, heads, 1)
        rows = (keep + head_starts).flatten()
        return {name: t.view(batch * heads * capacity, -1).index_select(0, rows).view(batch, heads, kept, *t.shape[3:])
                for name, t in self.buffers.tensors.items() if name in names}

    def forget_last(self, count: int) -> None:
        """Forget the last `count` entries (a question read only to score the document's entries)."""
        self.length = max(0, self.length - count)
        self.anchored = min(self.anchored, self.length)

    def room_for(self, needed: int, capacity: int) -> int:
        """The capacity to allocate for `needed` entries, growing from `capacity`: within the reservation, twice what
        is needed but never past it; beyond it (a policy that never evicts), one chunk (`state.step`) more, so a full
        cache holds at most one chunk of room it does not use."""
        if needed <= self.reserved:
            return max(needed, capacity, min(self.reserved, 2 * needed))
        return max(needed, capacity + self.state.step)

    def _angles(self, positions: torch.Tensor, frequencies: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.state.window_angles if self.is_sliding else self.state.angles)(positions, frequencies)

    def set(self, name: str, tensor: torch.Tensor) -> None:
        """Replace one field of every entry (scores rescored, keys re-rotated, positions renumbered)."""
        self._write({name: tensor})

    def _write(self, tensors: dict[str, torch.Tensor], start: int = 0) -> None:
        """Write entries start.. of some fields (B, kv_heads, k[, head_dim]), as values or as stored parts, first
        taking a private copy if entries are shared."""
        if self.buffers.shared > 0:
            self._private_copy(self.buffers.capacity)
        for name, t in tensors.items():
            for part, stored in self.state.encoded(name, t).items():
                if part not in self.buffers.tensors:
                    self.buffers.add(part, stored)
                self.buffers.tensors[part].narrow(2, start, stored.shape[2]).copy_(stored)

    def _own_tail(self, needed: int) -> None:
        """Make this cache the one that may write entries length..needed-1, growing or copying if it must."""
        buffers = self.buffers
        if buffers.tail_owner is not self.state and self.length > buffers.shared:
            raise LocretError("this cache's last entries were overwritten by another fork of the same reading; "
                              "fork the reading again")
        if self.length < buffers.shared or needed > buffers.capacity:
            self._private_copy(self.room_for(needed, buffers.capacity))
        self.buffers.tail_owner = self.state

    def _private_copy(self, capacity: int) -> None:
        """Move this layer's entries into buffers of its own, `capacity` long."""
        current = self.tensors()
        self.buffers = Buffers.allocate(current, capacity)
        self.buffers.tail_owner = self.state
        for name, t in current.items():
            self.buffers.tensors[name][:, :, : self.length] = t
