"""Retaining heads shipped inside the package for real models, found by the loaded model's identity.

Each folder under `heads/` holds `heads.safetensors` and `heads.json` (with the identity of the model they were
trained for, `identity.py`) and `locret.json` (the engine settings chosen with them), and may hold a reader trained
for the same model (`reader.json`, `reader_files.py`). A model gets a folder's heads
and settings when its shape and sampled weights match, however it was loaded: the 4-bit GGUF, nf4 or bf16 Hub
weights of one checkpoint all match it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from locret_cli.core.identity import same_model
from locret_cli.models.heads_files import HEADS_CONFIG
from locret_cli.models.reader_files import READER_CONFIG

HEADS_ROOT = Path(__file__).resolve().parent / "heads"
DEFAULTS_FILE = "locret.json"


@dataclass
class ShippedHeads:
    directory: Path
    defaults: dict  # engine settings recorded with the heads
    reader: Path | None = None  # the folder, when it holds a reader


def find_shipped(model, root: Path | None = None) -> ShippedHeads | None:
    """The shipped heads (under `root`, default the package's) trained for `model`, or None."""
    root = root or HEADS_ROOT
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        config = directory / HEADS_CONFIG
        if not config.is_file():
            continue
        identity = json.loads(config.read_text()).get("model_identity")
        if identity and same_model(model, identity)[0]:
            defaults = directory / DEFAULTS_FILE
            return ShippedHeads(directory, json.loads(defaults.read_text()) if defaults.is_file() else {},
                                directory if (directory / READER_CONFIG).is_file() else None)
    return None
