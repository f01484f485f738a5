"""Readers on disk: `reader.safetensors` (each adapted linear's `{module}.lora_A` and `{module}.lora_B`) beside
`reader.json`, which records the rank, the scale and the identity of the model the reader was trained for
(`core/identity.py`). A reader loads only for that model."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.core.identity import same_model, weights_identity
from locret_cli.errors import LocretError

READER_WEIGHTS = "reader.safetensors"
READER_CONFIG = "reader.json"
FORMAT_NAME = "locret-reader"
FORMAT_VERSION = 1


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
    """`reader.json` of the reader in `directory`; LocretError when it is missing or not a reader's."""
    config = Path(directory) / READER_CONFIG
    if not config.is_file():
        raise LocretError(f"no reader in {directory}: {READER_CONFIG} is missing")
    try:
        meta = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise LocretError(f"{config} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise LocretError(f"{config} is not a locret reader config")
    return meta


def load_reader(directory: str | Path, model, source: str | None = None) -> ReaderAdapter:
    """The reader in `directory`, checked against `model`, in fp32 on the model's device; `source` names it in
    answers (default: the directory). Refuses (LocretError) a reader trained for another model, naming the one it was
    trained for."""
    directory = Path(directory)
    meta = reader_meta(directory)
    identity = meta.get("model_identity")
    if not identity or not same_model(model, identity)[0]:
        trained_for = meta.get("model") or "a model of shape " + ", ".join(
            f"{k} {v}" for k, v in (identity or {}).get("shape", {}).items())
        raise LocretError(f"the reader in {directory} was trained for {trained_for}, not this model")
    weights = directory / READER_WEIGHTS
    if not weights.is_file():
        raise LocretError(f"{weights} is missing")
    with safe_open(str(weights), framework="pt") as f:
        tensors = {key: f.get_tensor(key) for key in f.keys()}
    try:
        reader = ReaderAdapter.from_tensors(tensors, meta["rank"], meta["alpha"])
    except (KeyError, RuntimeError) as exc:
        raise LocretError(f"{weights} does not match {READER_CONFIG}: {exc}") from None
    reader.source = source or str(directory)
    return reader.to(next(model.parameters()).device).eval()
