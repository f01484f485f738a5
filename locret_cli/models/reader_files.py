"""Readers on disk: `reader.safetensors` (each adapted linear's `{module}.lora_A` and `{module}.lora_B`) beside
`reader.json`, which records the rank, the scale and the identity of the model the reader was trained for
(`core/identity.py`). A reader loads only for that model."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from locret_cli.core.answer.reader import ReaderAdapter, adapted_linears
from locret_cli.core.identity import same_model, weights_identity
from locret_cli.errors import ModelError
from locret_cli.models.file_checks import (
    IDENTITY,
    checked,
    number,
    one_of,
    plain,
    read_json,
    read_tensors,
    record,
    text,
    whole,
)

READER_WEIGHTS = "reader.safetensors"
READER_CONFIG = "reader.json"
FORMAT_NAME = "locret-reader"
FORMAT_VERSION = 1
# what `reader.json` must hold; training adds fields of its own (its settings, the loss), which loading never reads
CONFIG_FIELDS = record({"format": one_of(FORMAT_NAME), "version": one_of(FORMAT_VERSION), "rank": whole(1),
                        "alpha": number(), "model_identity": IDENTITY}, {"model": text}, others=True)


def save_reader(reader: ReaderAdapter, directory: str | Path, model, extra: dict | None = None) -> None:
    """Write `reader` (trained for `model`) into `directory`, created if needed; the factors in fp32."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.to("cpu", torch.float32).contiguous() for name, t in reader.tensors().items()}
    save_file(tensors, str(directory / READER_WEIGHTS))
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "rank": reader.rank, "alpha": reader.alpha,
            "model_identity": weights_identity(model), **(extra or {})}
    (directory / READER_CONFIG).write_text(json.dumps(meta, indent=2) + "\n")


def reader_meta(directory: str | Path) -> dict:
    """`reader.json` of the reader in `directory`, checked: our format and version, a positive rank, a finite
    scale and the identity of the model it was trained for; LocretError when it is missing or a field is bad."""
    config = Path(directory) / READER_CONFIG
    if not config.is_file():
        raise ModelError(f"no reader in {directory}: {READER_CONFIG} is missing")
    return checked(read_json(config), CONFIG_FIELDS, config, "locret reader config")


def load_reader(directory: str | Path, model, source: str | None = None) -> ReaderAdapter:
    """The reader in `directory`, checked against `model`, in fp32 on the model's device; `source` names it in
    answers (default: the directory). Refuses (LocretError) a reader trained for another model, naming the one it was
    trained for, and factors that are missing or not of the sizes its config and the model's linears need."""
    directory = Path(directory)
    meta = reader_meta(directory)
    identity = meta["model_identity"]
    if not same_model(model, identity)[0]:
        trained_for = plain(meta["model"]) if meta.get("model") else "a model of shape " + ", ".join(
            f"{k} {v}" for k, v in identity["shape"].items())
        raise ModelError(f"the reader in {directory} was trained for {trained_for}, not this model")
    weights = directory / READER_WEIGHTS
    tensors = read_tensors(weights)
    if (wrong := factors_problem(tensors, meta["rank"], adapted_linears(model))) is not None:
        raise ModelError(f"{weights} does not match {READER_CONFIG} and the model: {wrong}")
    reader = ReaderAdapter.from_tensors(tensors, meta["rank"], meta["alpha"])
    reader.source = source or str(directory)
    return reader.to(next(model.parameters()).device).eval()


def factors_problem(tensors: dict[str, torch.Tensor], rank: int, linears: dict[str, torch.nn.Module]) -> str | None:
    """What is wrong with a reader's factors: each of their modules must be one of `linears`, with a floating-point
    `lora_A` (rank, in) and `lora_B` (out, rank) of its sizes, and no other tensor; None when nothing is."""
    modules = {name.removesuffix(".lora_A") for name in tensors if name.endswith(".lora_A")}
    if not modules:
        return "it holds no lora_A factor"
    expected = {f"{m}.{part}" for m in modules for part in ("lora_A", "lora_B")}
    if stray := sorted(set(tensors) - expected):
        return f"{stray[0]!r} is not a factor of an adapted linear"
    if missing := sorted(expected - set(tensors)):
        return f"{missing[0]!r} is missing"
    for module in sorted(modules):
        linear = linears.get(module)
        if linear is None:
            return f"the model has no linear {module!r} to adapt"
        for part, size in (("lora_A", (rank, linear.in_features)), ("lora_B", (linear.out_features, rank))):
            tensor = tensors[f"{module}.{part}"]
            if tuple(tensor.shape) != size or not tensor.is_floating_point():
                return f"{module}.{part} is {tensor.dtype} {list(tensor.shape)}, where float {list(size)} is needed"
    return None
