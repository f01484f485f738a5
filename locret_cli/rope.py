"""Moving cached keys to new positions without recomputing them.

Cached keys are stored already rotated: k_p = s · R(p·f) k, where f is the model's current inverse-frequency vector
and s its attention scaling. Rotating k_p by the angle (p'·f' − p·f) gives s · R(p'·f') k, exactly what the model
would have stored for position p' under frequencies f'. That one identity covers compact renumbering (p -> p', same f)
and longrope / dynamic-NTK frequency switches (same p, f -> f'). The frequencies come from the model's own rotary
module, so Llama 3 scaling, linear, YaRN and longrope factors are whatever transformers computes for the model.
"""

from __future__ import annotations

import torch

from locret_cli.errors import LocretError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


def check_supported(config) -> None:
    """Refuse, in one line, a model whose positional scheme locret cannot re-rotate."""
    config = config.get_text_config(decoder=True)
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise LocretError(
            f"model type {config.model_type!r} is not supported; locret handles {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default")
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise LocretError(f"RoPE type {rope_type!r} is not supported; locret handles {', '.join(SUPPORTED_ROPE_TYPES)}")


def rotary_module(model) -> torch.nn.Module:
    """The model's shared rotary-embedding module (`model.model.rotary_emb` for the supported families)."""
    for module in model.modules():
        if hasattr(module, "inv_freq") and type(module).__name__.endswith("RotaryEmbedding"):
            return module
    raise LocretError(f"{type(model).__name__} has no rotary embedding module")


@torch.no_grad()
def frequencies_for(rotary: torch.nn.Module, position_ids: torch.Tensor) -> torch.Tensor:
    """The inverse frequencies (rotary_dim / 2,) float32 the model will use for a forward at `position_ids`.

    Running the rotary module once lets dynamic schemes (longrope, dynamic NTK) pick their set, exactly as the
    model's own forward will a moment later.
    """
    rotary(torch.empty(0, dtype=torch.float32, device=position_ids.device), position_ids.view(1, -1))
    return rotary.inv_freq.detach().float().clone()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(keys: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate rotated keys further by `angles`, in the rotate-half layout the supported families use.

    keys: (B, H, n, head_dim), any float dtype. angles: (B, H, n, rotary_dim / 2), float64 or float32.
    Only the first rotary_dim channels turn (partial rotary); the rest pass through. Math runs in float32 and is
    cast back once. Returns a tensor shaped and typed like `keys`.
    """
    rotary_dim = 2 * angles.shape[-1]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    head = keys[..., :rotary_dim].float()
    turned = head * cos + _rotate_half(head) * sin
    if rotary_dim == keys.shape[-1]:
        return turned.to(keys.dtype)
    return torch.cat((turned.to(keys.dtype), keys[..., rotary_dim:]), dim=-1)


def rerotation_angles(
    old_positions: torch.Tensor, new_positions: torch.Tensor, old_freq: torch.Tensor, new_freq: torch.Tensor
) -> torch.Tensor:
    """Angles taking keys from (old_positions, old_freq) to (new_positions, new_freq).

    positions: (B, H, n) integer; freq: (rotary_dim / 2,). Returns (B, H, n, rotary_dim / 2) float64.
    """
    if torch.equal(old_freq, new_freq):
        return (new_positions - old_positions).double()[..., None] * new_freq.double()
    return new_positions.double()[..., None] * new_freq.double() - old_positions.double()[..., None] * old_freq.double()
