"""`.locret` files: a Reading saved to disk, so a document is read once and asked later, in another process.

One safetensors file. Per layer i, `layers.i.{keys,values,scores,positions,origins}` are the cache's tensors as the
reading left them; `frequencies` the inverse RoPE frequencies its keys are rotated with; `units.{starts,first,last}`
the document's page or line map. The header's metadata key "locret" holds JSON: the format and its version, the
settings, the model's identity (shape, dtype, a fingerprint of its weights), the tokenizer's and the heads'
fingerprints, the document's name, size and SHA-256, a SHA-256 of every tensor, and a SHA-256 of the header itself
(`context_header.py`), checked before anything in the file is used. Nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from locret_cli import __version__
from locret_cli.api.answer import DocumentInfo
from locret_cli.api.context_header import DIGEST, FORMAT, VERSION, header_digest, read_header
from locret_cli.api.plan import Plan
from locret_cli.api.reading import Reading
from locret_cli.core.cache.bounded import FIELDS
from locret_cli.core.cache.quantized import parts
from locret_cli.core.engine import Engine
from locret_cli.core.heads import compute_dtype
from locret_cli.core.policies import Policy
from locret_cli.errors import InputError, LocretError, SettingError
from locret_cli.files import CONTEXT_SUFFIX, check_output, replacing
from locret_cli.inputs.sources import SourceMap
from locret_cli.models.file_checks import read_tensors
from locret_cli.models.fingerprint import heads_fingerprint, model_identity, tokenizer_fingerprint

LAYER_TENSORS = FIELDS  # what each layer saves; unrotated keys are turned back again if the loaded keys ever move
UNIT_TENSORS = ("starts", "first", "last")
INPUT_IDS = "document.ids"  # every token read, for re-reading windows of it; absent where the reading had none


def layer_parts(kv_bits: int) -> list[str]:
    """The stored tensors of each layer's LAYER_TENSORS at `kv_bits`: in 8 or 4 bits, codes and scales
    (`core/cache/quantized.py`), saved as held."""
    return [part for name in LAYER_TENSORS for part in parts(name, kv_bits)]


@dataclass
class SavedContext:
    """A written `.locret` file: its size, and the cache entries it holds per KV head."""

    path: str
    size_bytes: int
    entries: int
    bytes_per_entry: float  # file bytes per kept entry per head, summed over layers and KV heads


class SavedPolicy(Policy):
    """The policy a saved reading was read with, by name: a loaded reading answers, it never reads on."""

    def __init__(self, name: str):
        self.name = name

    def score(self, layer_idx, q, k, v, token_index):
        raise LocretError("a reading loaded from a .locret file cannot read more of a document")


def save_reading(reading: Reading, path: str | Path, heads=None, force: bool = False) -> SavedContext:
    """Write `reading` to `path` (which must end in .locret). Refuses an existing path unless `force`; writes to a
    temporary file first, so a failed write leaves nothing half-written."""
    path = check_output(path, force, CONTEXT_SUFFIX)
    reading.read_now()
    engine = reading.engine
    engine.cache.fit()  # each layer's tensors its whole buffers: `contiguous()` below copies none of them
    stored = layer_parts(engine.settings.kv_bits)
    tensors = {f"layers.{i}.{name}": t.contiguous().cpu()
               for i, layer in enumerate(engine.cache.layers) for name, t in layer.tensors().items() if name in stored}
    tensors["frequencies"] = engine.cache.frequencies.contiguous().cpu()
    for name in UNIT_TENSORS:
        tensors[f"units.{name}"] = torch.tensor(getattr(reading.source_map, name), dtype=torch.int64)
    if reading.input_ids is not None:
        tensors[INPUT_IDS] = reading.input_ids.to(torch.int32).contiguous().cpu()
    header = {
        "format": FORMAT, "version": VERSION, "locret": __version__,
        "model": {"name": reading.model_name, **model_identity(engine.model)},
        "tokenizer": tokenizer_fingerprint(reading.tokenizer),
        "heads": heads_fingerprint(heads),
        "settings": asdict(engine.settings),
        "prefix_ids": reading.prefix_ids,
        "engine": engine.saved_state(),
        "document": reading.document.to_json(),
        "units": reading.source_map.kind,
        "tensors_sha256": tensors_digest(tensors),
    }
    if reading.read_for:  # a question-agnostic read writes no read_for
        header["read_for"] = list(reading.read_for)
    header[DIGEST] = header_digest(header)
    with replacing(path) as temporary:
        save_file(tensors, str(temporary), metadata={"locret": json.dumps(header)})
    size = path.stat().st_size
    entries = engine.kept_tokens
    heads_total = sum(layer.keys.shape[0] * layer.keys.shape[1] for layer in engine.cache.layers)
    return SavedContext(str(path), size, entries, size / max(entries * heads_total, 1))


def load_reading(path: str | Path, session, plan: Plan) -> Reading:
    """The Reading saved at `path`, on the `session` model's device, answering with `plan`'s answer settings (its read
    settings are the file's). Refuses, in one line, a file for another model, tokenizer or heads, and one whose
    tensors do not match their checksum."""
    from locret_cli.api.engines import build_engine

    started = time.perf_counter()
    header = read_header(path)
    loaded = session.loaded
    check_matches(header, loaded.model, loaded.tokenizer, session.heads, path)
    tensors = read_tensors(Path(path))
    if tensors_digest(tensors) != header["tensors_sha256"]:
        raise InputError(f"{path} is corrupted: its tensors do not match the checksum written with them")
    engine = build_engine(loaded.model, plan, SavedPolicy(plan.read.policy), session.reader)
    try:
        engine.restore(layer_tensors(engine, tensors), tensors["frequencies"].to(engine.device), header["engine"])
        source_map = SourceMap(header["units"], *(tensors[f"units.{n}"].tolist() for n in UNIT_TENSORS))
    except (KeyError, IndexError, RuntimeError, ValueError) as exc:
        raise InputError(f"{path} is not a readable .locret file (missing or misshapen tensors: {exc})") from None
    return Reading(engine, loaded.tokenizer, loaded.name, list(header["prefix_ids"]), source_map,
                   DocumentInfo(**header["document"]), time.perf_counter() - started, loaded_from=str(path),
                   input_ids=tensors.get(INPUT_IDS), read_for=tuple(header.get("read_for", ())))


def layer_tensors(engine: Engine, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Each layer's saved cache tensors, on the engine's device, keys and values in the model's dtype."""
    device, dtype, names = engine.device, compute_dtype(engine.model), layer_parts(engine.settings.kv_bits)
    layers = []
    for i in range(len(engine.cache.layers)):
        loaded = {name: tensors[f"layers.{i}.{name}"].to(device) for name in names}
        layers.append({name: t.to(dtype) if name in ("keys", "values") and t.is_floating_point() else t
                       for name, t in loaded.items()})
    return layers


def check_matches(header: dict, model, tokenizer, heads, path) -> None:
    """Refuse a saved context that another model, tokenizer or set of heads wrote."""
    saved, current = header["model"], model_identity(model)
    redo = "ask it with the model it was read with, or read the document again"
    if saved["shape"] != current["shape"] or saved["weights_sha256"] != current["weights_sha256"]:
        if saved["shape"] == current["shape"] and saved["dtype"] != current["dtype"]:
            raise SettingError("{path} was read with {saved} weights and this run loads {current}: pass {dtype} "
                               "{short}", path=path, saved=saved["dtype"], current=current["dtype"],
                               short=short_dtype(saved["dtype"]))
        raise InputError(f"{path} was read by another model ({saved['name']}, weights "
                          f"{saved['weights_sha256'][:12]}; this one's are {current['weights_sha256'][:12]}): {redo}")
    if header["tokenizer"] != tokenizer_fingerprint(tokenizer):
        raise InputError(f"{path} was read with another tokenizer: {redo}")
    given = heads_fingerprint(heads)
    if given is not None and header["heads"] is not None and given != header["heads"]:
        raise InputError(f"{path} was read with other retaining heads ({header['heads']['sha256'][:12]}; these "
                          f"are {given['sha256'][:12]}): pass the heads it was read with, or read it again")


def short_dtype(name: str) -> str:
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}.get(name, name)


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()
