"""Reader adapters set by hand for the tests."""

from __future__ import annotations

import torch

from locret_cli.core.answer.reader import ReaderAdapter


def strong_reader(model, seed: int = 3) -> ReaderAdapter:
    """A reader whose updates are far from zero, so that they change what the model says."""
    torch.manual_seed(seed)
    reader = ReaderAdapter.for_model(model, rank=4)
    with torch.no_grad():
        for b in reader.up:
            b.normal_(0, 0.5)
    return reader
