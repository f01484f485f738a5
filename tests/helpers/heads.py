"""Retaining heads saved for a model, with its weights' identity, as shipped heads are."""

from __future__ import annotations

import json

from locret_cli.core.heads import RetainingHeads
from locret_cli.core.identity import weights_identity
from locret_cli.models import shipped
from locret_cli.models.heads_files import save_heads


def save_heads_for(model, directory, defaults=None):
    """Random retaining heads for `model` saved in `directory` with its weights' identity, and `defaults` as their
    shipped settings when given; returns `directory`."""
    save_heads(RetainingHeads.for_model(model, hidden=16), directory, extra={"model_identity": weights_identity(model)})
    if defaults is not None:
        (directory / shipped.DEFAULTS_FILE).write_text(json.dumps(defaults))
    return directory
