"""Retaining heads on disk: written and read in locret's format, and read from the official Locret checkpoints.

- ours: `heads.safetensors` (keys `layers.{i}.fc1.weight`, ...) beside `heads.json`, which records the model shape
  the heads were trained for and, since heads are trained with it, the model's identity (`core/identity.py`);
- the official Locret checkpoints: weights named `model.layers.{i}.self_attn.fc1.weight` / `fc2.weight` (and biases),
  in `.safetensors` or `.bin` files (read weights-only), possibly inside a full model checkpoint.
"""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

from locret_cli.core.heads import RetainingHeads, activation_of, compute_dtype
from locret_cli.core.identity import SAME_MODEL, same_model
from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import has_activation
from locret_cli.errors import ModelError
from locret_cli.models.file_checks import (
    IDENTITY,
    MODEL_SHAPE,
    checked,
    maybe,
    one_of,
    read_json,
    read_tensors,
    record,
    shown,
    text,
    whole,
)

HEADS_WEIGHTS = "heads.safetensors"
HEADS_CONFIG = "heads.json"
FORMAT_NAME = "locret-heads"
FORMAT_VERSION = 1
_OFFICIAL_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.(fc1|fc2)\.(weight|bias)$")
# what `heads.json` must hold; training adds fields of its own (model, data, training), which loading never reads
CONFIG_FIELDS = record({"format": one_of(FORMAT_NAME), "version": one_of(FORMAT_VERSION), "model_shape": MODEL_SHAPE,
                        "hidden": whole(1), "activation": text}, {"model_identity": maybe(IDENTITY)}, others=True)


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
        raise ModelError(f"heads not found: {path}")
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
        raise ModelError(
            f"heads in {directory} were trained for another model of this shape (its weights agree with the "
            f"model's to cosine {cosine:.2f}; the same model in any precision agrees above {SAME_MODEL})"
        )


def other_shape(directory, saved: ModelShape, shape: ModelShape) -> ModelError:
    """The refusal of heads in `directory`, saved for the shape `saved`, by a model of `shape`."""
    diffs = ", ".join(f"{k} {v} (model has {getattr(shape, k)})" for k, v in asdict(saved).items()
                      if getattr(shape, k) != v)
    return ModelError(f"heads in {directory} were trained for another model shape: {diffs}")


def heads_config(directory: Path) -> dict:
    """`heads.json` in `directory`, checked: our format and version, the model shape, a hidden size and an
    activation transformers has, and (optional) the model's identity; LocretError naming the first bad field."""
    path = directory / HEADS_CONFIG
    meta = checked(read_json(path), CONFIG_FIELDS, path, "locret heads config")
    if not has_activation(meta["activation"]):
        raise ModelError(f"{path} is not a valid locret heads config: activation {shown(meta['activation'])} is "
                          "not an activation transformers has")
    return meta


def _load_ours(directory: Path, shape: ModelShape, model) -> RetainingHeads:
    meta = heads_config(directory)
    saved = ModelShape(**meta["model_shape"])
    if saved != shape:
        raise other_shape(directory, saved, shape)
    if meta.get("model_identity"):
        _check_identity(directory, meta["model_identity"], model)
    weights = directory / HEADS_WEIGHTS
    return _heads_from(read_tensors(weights), shape, meta["activation"], f"the heads in {weights}", meta["hidden"])


def _official_tensors(path: Path) -> dict[str, torch.Tensor]:
    """Every fc1/fc2 tensor of an official checkpoint, renamed to ours (`layers.{i}.fc1.weight`)."""
    files = [path] if path.is_file() else sorted([*path.glob("*.safetensors"), *path.glob("*.bin")])
    found: dict[str, torch.Tensor] = {}
    for file in files:
        if file.suffix == ".safetensors":
            state = read_tensors(file, _OFFICIAL_KEY.search)
        elif file.suffix == ".bin":
            try:
                state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except Exception as exc:  # pickle errors come in many types
                reason = ("it holds more than weights" if isinstance(exc, pickle.UnpicklingError)
                          else str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                raise ModelError(f"cannot read {file} as a weights-only checkpoint: {reason}") from None
            if not isinstance(state, dict):
                raise ModelError(f"{file} holds a {type(state).__name__}, not weights by name")
        else:
            continue
        for key, tensor in state.items():
            if isinstance(key, str) and isinstance(tensor, torch.Tensor) and (m := _OFFICIAL_KEY.search(key)):
                found[f"layers.{m[1]}.{m[2]}.{m[3]}"] = tensor
    if not found:
        raise ModelError(
            f"no retaining heads in {path}: expected {HEADS_CONFIG} or weights named "
            "model.layers.<i>.self_attn.fc1.weight / fc2.weight"
        )
    return found


def _load_official(path: Path, shape: ModelShape, activation: str) -> RetainingHeads:
    state = _official_tensors(path)
    layers = 1 + max(int(k.split(".")[1]) for k in state)
    if layers != shape.layers:
        raise ModelError(f"heads in {path} have {layers} layers; the model has {shape.layers}")
    fc1, fc2 = state.get("layers.0.fc1.weight"), state.get("layers.0.fc2.weight")
    if fc1 is not None and fc2 is not None and fc1.dim() == fc2.dim() == 2 and (
            fc1.shape[1] != shape.qkv_width or fc2.shape[0] != shape.kv_heads):
        raise ModelError(
            f"heads in {path} take {fc1.shape[1]} inputs and give {fc2.shape[0]} scores; "
            f"the model needs {shape.qkv_width} inputs and {shape.kv_heads} scores (one per KV head)"
        )
    return _heads_from(state, shape, activation, f"the heads in {path}")


def _heads_from(state: dict[str, torch.Tensor], shape: ModelShape, activation: str, source: str,
                hidden: int | None = None) -> RetainingHeads:
    """Heads for `shape` holding `state` (our names; biases all there or none), once every tensor is there in the
    size the model and `hidden` (None: the file's own) need: nothing is allocated for a size the file lacks."""
    first = state.get("layers.0.fc1.weight")
    hidden = hidden or (first.shape[0] if first is not None and first.dim() == 2 else 0)
    if not hidden:
        raise ModelError(f"{source} have no layers.0.fc1.weight matrix")
    bias = "layers.0.fc1.bias" in state
    sizes: dict[str, tuple[int, ...]] = {}
    for i in range(shape.layers):
        sizes |= {f"layers.{i}.fc1.weight": (hidden, shape.qkv_width),
                  f"layers.{i}.fc2.weight": (shape.kv_heads, hidden)}
        if bias:
            sizes |= {f"layers.{i}.fc1.bias": (hidden,), f"layers.{i}.fc2.bias": (shape.kv_heads,)}
    missing, unexpected = sorted(set(sizes) - set(state)), sorted(set(state) - set(sizes))
    if missing or unexpected:
        raise ModelError(f"{source} are incomplete: missing {missing[:3]}, unexpected {unexpected[:3]}")
    wrong = [f"{name} is {list(state[name].shape)}, where {list(size)} is needed" for name, size in sizes.items()
             if tuple(state[name].shape) != size]
    wrong += [f"{name} holds {tensor.dtype}, not floating-point numbers" for name, tensor in state.items()
              if not tensor.is_floating_point()]
    if wrong:
        raise ModelError(f"{source} do not fit this model: {'; '.join(wrong[:2])}")
    heads = RetainingHeads(shape, hidden, activation)
    if not bias:
        for head in heads.layers:
            head.fc1.bias = head.fc2.bias = None
    heads.load_state_dict(state)  # strict: every name and size is checked above
    return heads
