"""What a model's files tell before its weights load: its shape, from its config alone, and, for a safetensors
checkpoint on disk (a converted folder, or the copy `gguf_cache.py` keeps of a GGUF file), the sampled weights that
identify it (`core/identity.py`). A run that no loaded weights could change (no shipped heads for this model, heads
of another shape) is refused here, before a load that takes seconds to a minute.

Where the files tell nothing cheaply (a Hub id not in the local cache, a GGUF file never loaded before), the check
is left to the loaded model, as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from locret_cli.core.identity import SAME_MODEL, sample_index, samples_similarity
from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import sampled_weight_names
from locret_cli.errors import LocretError, SettingError
from locret_cli.models import shipped
from locret_cli.models.heads_files import HEADS_CONFIG, heads_config, other_shape


def shape_of(source: str) -> ModelShape | None:
    """The attention sizes of `source` (a GGUF file, a folder, a Hub id already cached) from its header or config,
    or None where they cannot be read without the weights."""
    from locret_cli.models import gguf

    try:
        if gguf.is_gguf(source):
            return gguf.shape(Path(source)) if Path(source).is_file() else None
        if (Path(source) / "config.json").is_file() or _hub_cached(source):
            from transformers import AutoConfig

            return ModelShape.from_config(AutoConfig.from_pretrained(source))
    except (OSError, ValueError, KeyError, TypeError, LocretError):
        return None
    return None


def _hub_cached(name: str) -> bool:
    from locret_cli.models.named import in_hub_cache

    return "/" in name and not Path(name).exists() and in_hub_cache(name)


def _checkpoint_folder(source: str) -> Path | None:
    """A folder of safetensors weights holding `source`'s values: the folder itself, or a GGUF file's converted copy
    in any dtype."""
    from locret_cli.models import gguf, gguf_cache

    path = Path(source)
    if path.is_dir():
        return path if any(path.glob("*.safetensors")) else None
    if not gguf.is_gguf(source) or not path.is_file():
        return None
    return next(iter(gguf_cache.complete_copies(path)), None)


def samples_of(folder: Path, shape: ModelShape) -> dict[str, list[float]]:
    """The identity's sampled values, read row by row from the folder's safetensors files (nothing whole loads)."""
    from safetensors import safe_open

    wanted = set(sampled_weight_names(shape.layers))
    found: dict[str, list[float]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as tensors:
            for name in wanted & set(tensors.keys()):
                values = tensors.get_slice(name)
                rows, cols = values.get_shape()[0], (values.get_shape() + [1])[1]
                index = sample_index(rows * cols).tolist()
                found[name] = [round(float(values[i // cols:i // cols + 1].reshape(-1)[i % cols]), 6) for i in index]
    return found


def require_shipped_heads(source: str, root: Path | None = None) -> None:
    """Refuse, before loading, a model that no heads shipped under `root` can fit: none of its shape, or (where its
    weights can be sampled from disk) none recorded for its weights."""
    shape = shape_of(source)
    if shape is None:
        return
    recorded = [json.loads(c.read_text()).get("model_identity") or {} for c in
                sorted((root or shipped.HEADS_ROOT).glob(f"*/{HEADS_CONFIG}"))]
    same_shape = [r for r in recorded if r.get("shape") and ModelShape(**r["shape"]) == shape]
    folder = _checkpoint_folder(source) if same_shape else None
    if folder is not None:
        mine = samples_of(folder, shape)
        same_shape = [r for r in same_shape if samples_similarity(mine, r.get("weight_samples", {})) >= SAME_MODEL]
    if not same_shape:
        raise SettingError("the locret policy needs retaining heads for this model, and none ship for it: pass "
                           "{heads} DIR (train them with `locret train`), or choose {policy} streaming or full")


def check_heads_shape(heads: str, source: str) -> None:
    """Refuse, before loading, heads in our format with a bad config (`heads_config`), or recorded for another
    shape than `source`'s config says."""
    config = Path(heads) / HEADS_CONFIG
    shape = shape_of(source) if config.is_file() else None
    if shape is None:
        return
    recorded = ModelShape(**heads_config(Path(heads))["model_shape"])
    if recorded != shape:
        raise other_shape(heads, recorded, shape)
