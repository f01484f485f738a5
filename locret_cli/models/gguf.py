"""GGUF model files (llama.cpp's format), loaded through transformers' GGUF reader.

transformers dequantizes every tensor while loading: a 4-bit GGUF file becomes an ordinary model in the dtype asked
for (docs/real-models.md measures what that costs). Only the families locret supports (`core/families.py`) are
accepted; the file's architecture is read from its header before anything heavy happens.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from locret_cli.core.families import GGUF_ARCHITECTURES
from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import quiet_gguf_conversion
from locret_cli.errors import LocretError, ModelError
from locret_cli.models import gguf_header

INSTALL_HINT = "pip install 'locret-cli[gguf]'"
T = TypeVar("T")


def is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def require_packages() -> None:
    """transformers reads GGUF with `gguf` and places weights with `accelerate`; say how to get both."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise LocretError(f"GGUF models need {' and '.join(missing)}: {INSTALL_HINT}")


def architecture(path: Path) -> str:
    """The file's `general.architecture`, refusing a file that is missing or not GGUF."""
    found = header(path, ("general.architecture",))["general.architecture"]
    if not isinstance(found, str):
        raise ModelError(f"{path} is not a readable GGUF file: its general.architecture is not a string")
    return found


def shape(path: Path) -> ModelShape:
    """The attention sizes the header of a file of a supported architecture records, for checks made before its
    weights load: the layer count, heads and width must be there, each a positive count; the KV heads and the key
    length, where missing, are the heads and the width per head."""
    sizes = ("block_count", "attention.head_count", "embedding_length", "attention.head_count_kv",
             "attention.key_length")
    arch = check_supported(path)
    found = header(path, ("general.architecture", *(f"{arch}.{s}" for s in sizes)), required=4)
    for key, value in found.items():
        if key != "general.architecture" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ModelError(f"{path} is not a readable GGUF file: its {key} is {value!r}, not a positive count")
    layers, heads, hidden, kv_heads, key_length = (found.get(f"{arch}.{s}") for s in sizes)
    return ModelShape(layers=layers, heads=heads, kv_heads=kv_heads or heads, head_dim=key_length or hidden // heads,
                      hidden_size=hidden)


def header(path: Path, keys: tuple[str, ...], required: int = 1) -> dict:
    """The values of `keys` in the header, of which the first `required` must be there; refuses a file that is
    missing or not GGUF. The pairs are read up to the last key wanted, the other values skipped unparsed
    (`gguf_header.py`): `GGUFReader` would parse every field, the tokenizer's vocabulary included, which is slow for
    a real model."""
    found = _parsed(path, lambda: gguf_header.values(path, keys))
    missing = [k for k in keys[:required] if k not in found]
    if missing:
        raise ModelError(f"{path} is not a readable GGUF file: its header has no {', '.join(missing)}")
    return found


def check_layout(path: Path) -> None:
    """Refuse, in one line, a file whose whole header gguf's `GGUFReader` could not read within the file
    (`gguf_header.check_layout`): what transformers loads it with."""
    _parsed(path, lambda: gguf_header.check_layout(path))


def _parsed(path: Path, parse: Callable[[], T]) -> T:
    """What `parse` reads from the GGUF file at `path`; its ValueError or OSError as one LocretError line."""
    if not path.is_file():
        raise LocretError(f"no such GGUF file: {path}")
    require_packages()
    try:
        return parse()
    except (ValueError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ModelError(f"{path} is not a readable GGUF file: {reason}") from None


def check_supported(path: Path) -> str:
    """The architecture of a GGUF file locret can drive; any other is refused in one line."""
    found = architecture(path)
    if found not in GGUF_ARCHITECTURES:
        raise ModelError(
            f"{path.name} holds a {found!r} model; locret reads GGUF files of {', '.join(GGUF_ARCHITECTURES)} models"
        )
    return found


def load(path: Path, dtype, trust_remote_code: bool):
    """(model, tokenizer) from a GGUF file, both from the file alone, once its whole header reads within the file
    (`check_layout`). What transformers then cannot make of the header's values (a tensor of another size than the
    config, a field of the wrong type) is refused in one line too."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_supported(path)
    check_layout(path)
    directory, name = str(path.parent), path.name
    try:
        with quiet_gguf_conversion(), _parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name, trust_remote_code=trust_remote_code)
            model = AutoModelForCausalLM.from_pretrained(
                directory, gguf_file=name, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
            )
    except (RuntimeError, KeyError, IndexError, TypeError) as exc:  # transformers' own, on values it reads
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{path} holds a model transformers cannot load: {type(exc).__name__}: {reason}") from None
    return model, tokenizer


@contextmanager
def _parsed_once() -> Iterator[None]:
    """Work transformers repeats while loading a GGUF file, done once inside this context; restored on exit.

    - It opens the file with gguf's `GGUFReader` three times (config, tokenizer, weights), and each reader parses
      every metadata field, the tokenizer's vocabulary included: one reader per file is shared.
    - It maps GGUF tensor names to its own by walking every submodule of the model, and builds gguf's
      `TensorNameMap` for the whole architecture again at each one (about 400 times for SmolLM2). The map depends
      only on the architecture and the layer count: each is built once."""
    import gguf

    make_reader, build_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def shared_reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = make_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = shared_reader, functools.cache(build_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = make_reader, build_map


def save_dequantized(model, tokenizer, directory: Path) -> Path:
    """Write a model loaded from a GGUF file as an ordinary safetensors checkpoint (config, weights in the dtype it
    was loaded in, tokenizer), the layout the Hub uses; `save_pretrained` refuses GGUF-loaded models. This is how the
    same weights reach `--load-4bit` (docs/real-models.md)."""
    from safetensors.torch import save_model

    directory.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"}
    type(model.config).from_dict(settings).save_pretrained(directory)
    save_model(model, str(directory / "model.safetensors"))
    tokenizer.save_pretrained(directory)
    return directory


def convert(source: str, directory: Path, dtype) -> Path:
    """Write the GGUF model `source` (a path or a known short name) as a safetensors checkpoint in `directory`
    (`save_dequantized`), which must not exist yet or be empty. `--max-memory` leaves such a checkpoint's weights on
    disk; transformers cannot do that with a GGUF file."""
    from locret_cli.models import named

    path = named.resolve(source)
    if not is_gguf(path):
        raise LocretError(f"{source} is not a .gguf file; only GGUF models need converting")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise LocretError(f"{directory} already exists and is not an empty directory; choose another")
    model, tokenizer = load(Path(path), dtype, trust_remote_code=False)
    return save_dequantized(model, tokenizer, directory)
