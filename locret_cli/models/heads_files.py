"""Retaining heads on disk: written and read in locret's format, and read from the official Locret checkpoints.

- ours: `heads.safetensors` (keys `layers.{i}.fc1.weight`, ...) beside `heads.json`, which records the model shape
  the heads were trained for and, since heads are trained with it, the model's identity (`core/identity.py`);
- the official Locret checkpoints: weights named `model.layers.{i}.self_attn.fc1.weight` / `fc2.weight` (and biases),
  in `.safetensors` or `.bin` files (read weights-only), possibly inside a full model checkpoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from locret_cli.core.heads import RetainingHeads, activation_of, compute_dtype
from locret_cli.core.identity import SAME_MODEL, same_model
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError

HEADS_WEIGHTS = "heads.safetensors"
HEADS_CONFIG = "heads.json"
FORMAT_NAME = "locret-heads"
FORMAT_VERSION = 1
_OFFICIAL_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.(fc1|fc2)\.(weight|bias)$")


def save_heads(heads: RetainingHeads, directory: str | Path, extra: dict | None = None) -> None:
        """Write `heads.safetensors` and `heads.json` into `directory` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in heads.state_dict().items()}
        save_file(tensors, str(directory / HEADS_WEIGHTS))
        meta = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "model_shape": asdict(heads.shape),
            "hidden": heads.hidden,
            "activation": heads.activation,
            **(extra or {}),
        }
        (directory / HEADS_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")


def load_heads(path: str | Path, model, dtype: torch.dtype | None = None) -> RetainingHeads:
    """Load heads from our format or an official Locret checkpoint and check them against `model`.

    `path` is a directory or a single weights file; the heads come in `dtype` (default: the model's compute dtype).
    Raises LocretError with the first mismatch found.
    """
    path = Path(path)
    if not path.exists():
        raise LocretError(f"heads not found: {path}")
    config = model.config.get_text_config(decoder=True)
    shape = ModelShape.from_config(config)
    if path.is_dir() and (path / HEADS_CONFIG).exists():
        heads = _load_ours(path, shape, model)
    else:
        heads = _load_official(path, shape, activation_of(config))
    return heads.to(device=model.device, dtype=dtype or compute_dtype(model)).eval()


def _check_identity(directory: Path, identity: dict, model) -> None:
    """Refuse heads recorded for other weights of the same shape (`core/identity.py`)."""
    match, cosine = same_model(model, identity)
    if not match:
        raise LocretError(
            f"heads in {directory} were trained for another model of this shape (its weights agree with the "
            f"model's to cosine {cosine:.2f}; the same model in any precision agrees above {SAME_MODEL})"
        )


def other_shape(directory, saved: ModelShape, shape: ModelShape) -> LocretError:
    """The refusal of heads in `directory`, saved for the shape `saved`, by a model of `shape`."""
    diffs = ", ".join(f"{k} {v} (model has {getattr(shape, k)})" for k, v in asdict(saved).items()
                      if getattr(shape, k) != v)
    return LocretError(f"heads in {directory} were trained for another model shape: {diffs}")


def _load_ours(directory: Path, shape: ModelShape, model) -> RetainingHeads:
    try:
        meta = json.loads((directory / HEADS_CONFIG).read_text())
    except json.JSONDecodeError as exc:
        raise LocretError(f"{directory / HEADS_CONFIG} is not valid JSON: {exc}") from None
    if meta.get("format") != FORMAT_NAME:
        raise LocretError(f"{directory / HEADS_CONFIG} is not a locret heads config")
    saved = ModelShape(**meta["model_shape"])
    if saved == shape and meta.get("model_identity"):
        _check_identity(directory, meta["model_identity"], model)
    if saved != shape:
        raise other_shape(directory, saved, shape)
    heads = RetainingHeads(shape, meta["hidden"], meta["activation"])
    weights = directory / HEADS_WEIGHTS
    if not weights.exists():
        raise LocretError(f"{weights} is missing")
    with safe_open(str(weights), framework="pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    missing, unexpected = heads.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise LocretError(f"{weights} does not match its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return heads


def _official_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every fc1/fc2 tensor of an official checkpoint, renamed to ours (`layers.{i}.fc1.weight`)."""
    files = [path] if path.is_file() else sorted([*path.glob("*.safetensors"), *path.glob("*.bin")])
    found: dict[str, torch.Tensor] = {}
    for file in files:
        if file.suffix == ".safetensors":
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    if m := _OFFICIAL_KEY.search(key):
                        found[f"layers.{m[1]}.{m[2]}.{m[3]}"] = f.get_tensor(key)
        elif file.suffix == ".bin":
            try:
                state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except Exception as exc:  # pickle errors come in many types
                raise LocretError(f"cannot read {file} as a weights-only checkpoint: {exc}") from None
            for key, tensor in state.items():
                if m := _OFFICIAL_KEY.search(key):
                    found[f"layers.{m[1]}.{m[2]}.{m[3]}"] = tensor
    if not found:
        raise LocretError(
            f"no retaining heads in {path}: expected {HEADS_CONFIG} or weights named "
            "model.layers.<i>.self_attn.fc1.weight / fc2.weight"
        )
    return found


def _load_official(path: Path, shape: ModelShape, activation: str) -> RetainingHeads:
    state = _official_tensors(path)
    layers = 1 + max(int(k.split(".")[1]) for k in state)
    if layers != shape.layers:
        raise LocretError(f"heads in {path} have {layers} layers; the model has {shape.layers}")
    fc1 = state["layers.0.fc1.weight"]
    if fc1.shape[1] != shape.qkv_width or state["layers.0.fc2.weight"].shape[0] != shape.kv_heads:
        raise LocretError(
            f"heads in {path} take {fc1.shape[1]} inputs and give {state['layers.0.fc2.weight'].shape[0]} scores; "
            f"the model needs {shape.qkv_width} inputs and {shape.kv_heads} scores (one per KV head)"
        )
    heads = RetainingHeads(shape, fc1.shape[0], activation)
    if "layers.0.fc1.bias" not in state:
        for head in heads.layers:
            head.fc1.bias = head.fc2.bias = None
    missing, unexpected = heads.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise LocretError(f"incomplete heads in {path}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return heads
