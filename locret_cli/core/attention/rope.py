"""Moving cached keys to new positions without recomputing them.

Cached keys are stored already rotated: k_p = s · R(p·f) k, where f is the model's current inverse-frequency vector
and s its attention scaling. Turning k_p back by p·f gives s · k, which no position or frequency changes; turning
that forward by p'·f' gives s · R(p'·f') k, exactly what the model would have stored for position p' under
frequencies f'. That covers compact renumbering (p -> p', same f) and longrope / dynamic-NTK frequency switches
(same p, f -> f'). The cache keeps s · k once a key first moves and turns every later move from it, so a key's
error does not grow with the number of moves (docs/cache.md, "No drift"). The frequencies come from the model's own
rotary module, so Llama 3 scaling, linear, YaRN and longrope factors are whatever transformers computes for the model.
"""

from __future__ import annotations

import torch

from locret_cli.core.families import family_of
from locret_cli.core.shape import FULL, SLIDING
from locret_cli.errors import LocretError

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")
LENGTH_DEPENDENT_ROPE_TYPES = ("dynamic", "longrope")  # their frequencies change with the positions a forward sees


def check_supported(config) -> None:
    """Refuse, in one line, a model of a family locret does not drive (`core/families.py`) or whose positional
    scheme it cannot re-rotate."""
    family_of(config)
    config = config.get_text_config(decoder=True)
    rope = getattr(config, "rope_parameters", None) or {}
    per_kind = FULL in rope or SLIDING in rope  # Gemma 3: one set of parameters per kind of layer
    for params in rope.values() if per_kind else [rope]:
        rope_type = params.get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES or (per_kind and rope_type in LENGTH_DEPENDENT_ROPE_TYPES):
            raise LocretError(f"RoPE type {rope_type!r} is not supported here; locret handles "
                              f"{', '.join(SUPPORTED_ROPE_TYPES)}, and no length-dependent one per kind of layer")


def changes_with_length(rotary: torch.nn.Module) -> bool:
    """Whether `rotary` picks its frequencies from the positions of each forward (dynamic NTK, longrope)."""
    rope_type = getattr(rotary, "rope_type", "default")  # a dict of them per kind of layer (Gemma 3): none is
    return isinstance(rope_type, str) and rope_type in LENGTH_DEPENDENT_ROPE_TYPES


@torch.no_grad()
def frequencies_for(rotary: torch.nn.Module, position_ids: torch.Tensor, kind: str = FULL) -> torch.Tensor:
    """The inverse frequencies (rotary_dim / 2,) float32 the model will use for a forward at `position_ids`, in its
    layers of `kind` (FULL or SLIDING: a rotary module with one set per kind, as Gemma 3's, is asked for that kind's).

    Running the rotary module once lets dynamic schemes (longrope, dynamic NTK) pick their set, exactly as the
    model's own forward will a moment later.
    """
    empty = torch.empty(0, dtype=torch.float32, device=position_ids.device)
    if hasattr(rotary, "inv_freq"):
        rotary(empty, position_ids.view(1, -1))
        return rotary.inv_freq.detach().float().clone()
    rotary(empty, position_ids.view(1, -1), kind)
    return getattr(rotary, f"{kind}_inv_freq").detach().float().clone()


def position_cos_sin(positions: torch.Tensor, freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (*positions.shape, rotary_dim / 2) float32, of the angles positions · freq.

    Each angle and its cos are taken in float64, once per distinct position: positions reach 10⁶, and float32 angles
    that large would be off by a good fraction of a radian.
    """
    distinct, index = torch.unique(positions, return_inverse=True)
    cos, sin = _cos_sin(distinct, freq)
    return cos[index], sin[index]


def _cos_sin(positions: torch.Tensor, freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (n, rotary_dim / 2) float32 of positions (n,) · freq, the angles and cos taken in float64."""
    angles = positions.double()[:, None] * freq.double().to(positions.device)
    return angles.cos().float(), angles.sin().float()


class AngleTable:
    """cos and sin of position · freq for positions 0..n-1, each angle in float64 as `position_cos_sin` takes it,
    computed once per frequency set and grown on demand: compact positions stay below budget + chunk + question +
    answer, so moving keys becomes a lookup. Positions past `limit` (original positions, up to 10⁶) are computed
    per distinct position instead. The last `RECENT` lookups are kept, each with a copy of its positions: every layer
    of one eviction asks for the same positions twice (where the chunk's new keys were, and where the kept keys
    go), and gets the same cos and sin without indexing the table again."""

    RECENT = 2

    def __init__(self, limit: int = 1 << 15):
        self.limit, self.freq, self.cos, self.sin = limit, None, None, None
        self.recent: list[tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []

    def __call__(self, positions: torch.Tensor, freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin, (*positions.shape, rotary_dim / 2) float32, equal to `position_cos_sin(positions, freq)`."""
        for seen, seen_freq, found in self.recent:
            if seen.shape == positions.shape and seen_freq is freq and torch.equal(seen, positions):
                return found
        top = int(positions.max()) + 1
        if top > self.limit or int(positions.min()) < 0:
            found = position_cos_sin(positions, freq)
        else:
            same = self.freq is not None and torch.equal(freq, self.freq)
            if not same or self.cos.shape[0] < top:
                rows = min(self.limit, max(top, 2 * self.cos.shape[0] if same else 0))
                self.cos, self.sin = _cos_sin(torch.arange(rows, device=positions.device), freq)
                self.freq = freq
            index = positions.long()
            found = self.cos[index], self.sin[index]
        self.recent = [(positions.clone(), freq, found), *self.recent[:self.RECENT - 1]]
        return found


def rotate(keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate keys (B, H, n, head_dim), any float dtype, by the angles whose cos and sin (B, H, n, rotary_dim / 2)
    float32 are given, in the rotate-half layout the supported families use; -sin turns them back.

    Only the first rotary_dim channels turn (partial rotary); the rest pass through. The turn runs in float32 on each
    half and is cast back once, as it is written into the result. Returns a tensor shaped and typed like `keys`.
    """
    half = cos.shape[-1]
    turning = keys[..., :2 * half].float()
    first, second = turning[..., :half], turning[..., half:]
    turned = torch.empty_like(keys)
    turned[..., :half] = first * cos - second * sin
    turned[..., half:2 * half] = second * cos + first * sin
    turned[..., 2 * half:] = keys[..., 2 * half:]
    return turned
