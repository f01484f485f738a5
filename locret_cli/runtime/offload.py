"""Models larger than the memory given them (`--max-memory SIZE`), as LLM in a flash runs them: the weights that do
not fit stay on disk, in the checkpoint's own safetensors file, and each layer's are read in when it runs.

accelerate does the placing (`device_map="auto"` with `max_memory`): the first layers that fit under the cap stay in
memory, the rest are on the meta device with a hook that loads their tensors before each forward and drops them
after. locret prefills in chunks, so a layer on disk is read once per chunk and serves all its tokens; a decode step
reads every such layer again for one token. transformers cannot offload the weights of a GGUF file (it dequantizes
them into memory as it reads), so a GGUF model is converted once to safetensors first (`locret convert`).
"""

from __future__ import annotations

import re

from locret_cli.core.measure import weight_bytes
from locret_cli.core.transformers_internals import weight_blocks
from locret_cli.errors import SettingError
from locret_cli.units import human_bytes

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """Bytes in a size such as `2GiB`, `500MB` or `1.5 gib` (decimal and binary units; a bare number is bytes)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in UNITS:
        raise SettingError("{max_memory} takes a size such as 2GiB or 500MB, got {value!r}", value=text)
    size = int(float(match.group(1)) * UNITS[match.group(2).lower()])
    if size <= 0:
        raise SettingError("{max_memory} must be positive, got {value!r}", value=text)
    return size


def placement(cap: int) -> dict:
    """from_pretrained's arguments that keep at most `cap` bytes of weights in memory and leave the rest on disk."""
    return {"device_map": "auto", "max_memory": {"cpu": cap}}


def largest_block_bytes(model) -> int:
    """Bytes of the largest unit accelerate places whole (a decoder layer, the embeddings, the output layer), read
    from the parameters' shapes, whether they are in memory or on disk."""
    return max(sum(p.numel() * p.element_size() for p in block.parameters()) for block in weight_blocks(model))


def check_cap(model, cap: int) -> None:
    """Refuse, in one line, a cap that cannot hold the largest layer: every layer must be in memory while it runs.
    The cap bounds the weights alone; the KV cache and a chunk's activations come on top, checked against the memory
    free as for every run (`core/measure.py`)."""
    layer = largest_block_bytes(model)
    if cap < layer:
        raise SettingError("{max_memory} {cap} cannot hold one layer of this model ({layer}); raise it",
                           cap=human_bytes(cap), layer=human_bytes(layer))


def is_offloaded(model) -> bool:
    """Whether some of `model`'s weights are on disk (placed there by `placement`)."""
    return "disk" in set(getattr(model, "hf_device_map", {}).values())


def describe(model) -> str:
    """Where the weights are, for the cost table: how many bytes are held in memory, and whether the rest is on
    disk."""
    held = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type != "meta")
    total = weight_bytes(model)
    if not is_offloaded(model):
        return f"all {human_bytes(total)} of weights fit in the memory allowed"
    return f"{human_bytes(held)} of {human_bytes(total)} of weights in memory, the rest read from disk per layer"
