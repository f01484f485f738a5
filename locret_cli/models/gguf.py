"""GGUF model files (llama.cpp's format), loaded through transformers' GGUF reader.

transformers dequantizes every tensor while loading: a 4-bit GGUF file becomes an ordinary model in the dtype asked
for (docs/real-models.md measures what that costs). Only the families locret supports are accepted; the file's
architecture is read from its header before anything heavy happens.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy

from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import quiet_gguf_conversion
from locret_cli.errors import LocretError

INSTALL_HINT = "pip install 'locret-cli[gguf]'"
# GGUF `general.architecture` values of the families locret supports (README: Llama, Mistral, Qwen2/3, Phi-3)
SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3")


def is_gguf(name: str) -> bool:
    return name.lower().endswith(".gguf")


def require_packages() -> None:
    """transformers reads GGUF with `gguf` and places weights with `accelerate`; say how to get both."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise LocretError(f"GGUF models need {' and '.join(missing)}: {INSTALL_HINT}")


def architecture(path: Path) -> str:
    """The file's `general.architecture`, refusing a file that is missing or not GGUF."""
    return header(path, ("general.architecture",))["general.architecture"]


def shape(path: Path) -> ModelShape:
    """The attention sizes the file's header records, for checks made before its weights load."""
    sizes = ("block_count", "attention.head_count", "attention.head_count_kv", "embedding_length",
             "attention.key_length")
    arch = architecture(path)
    found = header(path, ("general.architecture", *(f"{arch}.{s}" for s in sizes)), required=4)
    layers, heads, kv_heads, hidden, key_length = (found.get(f"{arch}.{s}") for s in sizes)
    return ModelShape(layers=layers, heads=heads, kv_heads=kv_heads or heads, head_dim=key_length or hidden // heads,
                      hidden_size=hidden)


def header(path: Path, keys: tuple[str, ...], required: int = 1) -> dict:
    """The values of `keys` in the header, of which the first `required` must be there; refuses a file that is
    missing or not GGUF. The pairs are read up to the last key wanted, the other values skipped unparsed:
    `GGUFReader` would parse every field, the tokenizer's vocabulary included, which is slow for a real model."""
    if not path.is_file():
        raise LocretError(f"no such GGUF file: {path}")
    require_packages()
    try:
        with path.open("rb") as f:
            found = _header_values(f, keys)
        missing = [k for k in keys[:required] if k not in found]
        if missing:
            raise ValueError(f"its header has no {', '.join(missing)}")
        return found
    except (ValueError, OSError, struct.error) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise LocretError(f"{path} is not a readable GGUF file: {reason}") from None


def _header_values(f: BinaryIO, keys: tuple[str, ...]) -> dict:
    """`keys`' scalar and string values from an open GGUF file (magic, version, tensor count, key-value count, then
    the pairs: key string, value type, value), skipping the other values."""
    from gguf import GGUF_MAGIC, GGUFValueType

    magic, version = struct.unpack("<II", f.read(8))
    if magic != GGUF_MAGIC:
        raise ValueError("no GGUF magic at the start")
    order = "<" if version & 0xFFFF else ">"  # a big-endian file's version reads byte-swapped
    _, pairs = struct.unpack(order + "QQ", f.read(16))

    def number(code: str) -> int:
        return struct.unpack(order + code, f.read(struct.calcsize(code)))[0]

    def text() -> bytes:
        size = number("Q")
        data = f.read(size)
        if len(data) != size:
            raise ValueError("the header ends inside a string")
        return data

    def skip(kind: int) -> None:
        if kind == GGUFValueType.STRING:
            text()
        elif kind == GGUFValueType.ARRAY:
            item, count = number("I"), number("Q")
            if item in (GGUFValueType.STRING, GGUFValueType.ARRAY):
                for _ in range(count):
                    skip(item)
            else:
                f.seek(count * _scalar_size(item), 1)
        else:
            f.seek(_scalar_size(kind), 1)

    found: dict = {}
    for _ in range(pairs):
        key, kind = text().decode(errors="replace"), number("I")
        if len(found) == len(keys):
            break
        if key in keys and kind == GGUFValueType.STRING:
            found[key] = text().decode()
        elif key in keys and kind not in (GGUFValueType.ARRAY, GGUFValueType.STRING):
            dtype = numpy.dtype(_scalar_type(kind)).newbyteorder(order)
            found[key] = numpy.frombuffer(f.read(dtype.itemsize), dtype=dtype)[0].item()
        else:
            skip(kind)
    return found


def _scalar_type(kind: int):
    from gguf import GGUFReader, GGUFValueType

    return GGUFReader.gguf_scalar_to_np[GGUFValueType(kind)]


def _scalar_size(kind: int) -> int:
    return numpy.dtype(_scalar_type(kind)).itemsize


def check_supported(path: Path) -> str:
    """The architecture of a GGUF file locret can drive; any other is refused in one line."""
    found = architecture(path)
    if found not in SUPPORTED:
        raise LocretError(
            f"{path.name} holds a {found!r} model; locret reads GGUF files of {', '.join(SUPPORTED)} models"
        )
    return found


def load(path: Path, dtype, trust_remote_code: bool):
    """(model, tokenizer) from a GGUF file, both from the file alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_supported(path)
    directory, name = str(path.parent), path.name
    with quiet_gguf_conversion(), _parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa"
        )
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
