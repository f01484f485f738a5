"""A converted copy of each GGUF file loaded, so later loads skip the conversion.

transformers builds a GGUF file's tokenizer from the vocabulary in its header and dequantizes every tensor, each
time: for a vocabulary as large as Gemma 3's that is most of a load (docs/gemma3.md), where reading the same model
and tokenizer back from a safetensors checkpoint is quick. The first load writes that checkpoint
(`gguf.save_dequantized`) under the cache folder, named by the file's SHA-256 and the dtype; later loads of the same
bytes in the same dtype read it.

The folder is `$LOCRET_CACHE_DIR`, else `$XDG_CACHE_HOME/locret`, else `~/.cache/locret`; `LOCRET_CACHE_DIR=`
(empty) turns the copy off. A copy is complete only once its marker file is written last, so an interrupted write is
made again; a folder that cannot be written leaves loading as it was, without a copy.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import torch

COMPLETE = "locret-complete"  # written last: the copy is whole


def cache_root() -> Path | None:
    """Where converted copies go, or None when `LOCRET_CACHE_DIR` is set empty."""
    chosen = os.environ.get("LOCRET_CACHE_DIR")
    if chosen is not None:
        return Path(chosen).expanduser() if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "locret"


def file_sha256(path: Path) -> str:
    """The file's SHA-256, hashed once per process for the same size and modification time: the check before a
    load and the load itself both name the converted copy by it."""
    stat = path.stat()
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256(path: str, size: int, modified: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def copy_folder(path: Path, dtype: torch.dtype) -> Path | None:
    """The folder of `path`'s converted copy in `dtype` (existing or not), or None when copies are off."""
    root = cache_root()
    if root is None:
        return None
    return root / "gguf" / f"{file_sha256(path)[:32]}-{str(dtype).removeprefix('torch.')}"


def complete_copies(path: Path) -> list[Path]:
    """`path`'s complete converted copies, in whatever dtype each was written."""
    root = cache_root()
    if root is None or not (root / "gguf").is_dir():
        return []
    stem = file_sha256(path)[:32]
    return sorted(f for f in (root / "gguf").glob(f"{stem}-*") if (f / COMPLETE).is_file())


def load(path: Path, dtype: torch.dtype, trust_remote_code: bool):
    """(model, tokenizer) of the GGUF file `path`: from its converted copy when there is one, else from the file,
    writing the copy for next time."""
    from locret_cli.models import gguf

    gguf.check_supported(path)
    folder = copy_folder(path, dtype)
    if folder is not None and (folder / COMPLETE).is_file():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=trust_remote_code,
                                                     attn_implementation="sdpa")
        return model, tokenizer
    model, tokenizer = gguf.load(path, dtype, trust_remote_code)
    if folder is not None:
        write_copy(model, tokenizer, folder)
    return model, tokenizer


def write_copy(model, tokenizer, folder: Path) -> None:
    """Write the converted copy beside its final place, then move it there whole; a failure leaves no copy."""
    from locret_cli.models.gguf import save_dequantized

    staging = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder.parent))
        save_dequantized(model, tokenizer, staging)
        (staging / COMPLETE).write_text("")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    except OSError:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
