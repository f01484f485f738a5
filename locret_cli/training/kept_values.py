"""Whether a saved read keeps the words an answer states.

A value (the words of the document that an answer states: "4821" in "The gate code is 4821.") counts as kept by one
(layer, KV head) of a read when every token of one of its occurrences in the document is among that head's kept
entries. Its share is the fraction of (layer, KV head) pairs that keep it. The reader trainer can skip questions
whose value a read barely keeps, so the reader never learns to guess an answer that is not in its cache.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from locret_cli.api.saved_context import INPUT_IDS
from locret_cli.errors import LocretError
from locret_cli.inputs.tokenizer import encode_text


def kept_map(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A saved read's document ids, and which of them each (layer, KV head) keeps: one boolean row per pair, one
    column per document token."""
    with safe_open(str(path), "pt") as saved:
        if INPUT_IDS not in saved.keys():
            raise LocretError(f"{path} was saved without its document's tokens; read it again")
        ids = saved.get_tensor(INPUT_IDS)
        names = sorted((n for n in saved.keys() if n.startswith("layers.") and n.endswith(".origins")),
                       key=lambda n: int(n.split(".")[1]))
        origins = torch.cat([saved.get_tensor(name).flatten(0, -2) for name in names]).long()
    kept = torch.zeros(origins.shape[0], len(ids), dtype=torch.bool)
    inside = (origins >= 0) & (origins < len(ids))
    rows = torch.arange(origins.shape[0]).unsqueeze(1).expand_as(origins)
    kept[rows[inside], origins[inside]] = True
    return ids, kept


def kept_share(ids: torch.Tensor, kept: torch.Tensor, value_ids: list[int]) -> float:
    """The largest share, over the occurrences of `value_ids` in `ids`, of the rows of `kept` that hold every token of
    the occurrence; 0.0 when it never occurs."""
    width = len(value_ids)
    if not width or width > len(ids):
        return 0.0
    starts = (ids.unfold(0, width, 1) == torch.tensor(value_ids)).all(1).nonzero().flatten().tolist()
    return max((kept[:, start:start + width].all(1).float().mean().item() for start in starts), default=0.0)


def value_share(tokenizer, ids: torch.Tensor, kept: torch.Tensor, value: str) -> float:
    """`kept_share` of `value`, tokenized as it stands after a space and at the start of a line."""
    return max(kept_share(ids, kept, encode_text(tokenizer, text)) for text in (" " + value, value))
