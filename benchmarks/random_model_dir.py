"""A random-weights model of a real shape saved as a local model directory, for benchmarks that load from disk."""

from __future__ import annotations

from pathlib import Path

import torch

from locret_cli.core.heads import RetainingHeads
from locret_cli.inputs.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer
from locret_cli.models.arch import random_model
from locret_cli.models.heads_files import save_heads


def write_random_model(preset: str, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Save a random `preset` model, a byte-level tokenizer and random heads (in `heads/`) as a local model dir."""
    directory = Path(directory)
    model = random_model(preset, dtype)
    model.save_pretrained(directory)
    TiktokenTokenizer.byte_level().save(directory / TIKTOKEN_FILE)
    save_heads(RetainingHeads.for_model(model), directory / "heads", extra={"note": "random weights"})
    return directory
