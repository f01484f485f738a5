"""The model families locret drives, one entry each: what their transformers configs and GGUF files call them, and
what their decoder layers are. The checks a model passes when it loads (`core/attention/rope.py`,
`models/gguf.py`), the choice of decode step (`core/answer/decode_step.py`) and the messages that name the families
all read this registry; `tests/test_families.py` builds a tiny model of every entry and checks what it claims.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from locret_cli.errors import ModelError


@dataclass(frozen=True)
class Family:
    """One family of decoder-only models, as locret drives it.

    - `model_type`: its transformers text config's `model_type`.
    - `name`: what messages call it.
    - `gguf_architecture`: the `general.architecture` of its GGUF files, or None where locret reads none.
    - `plain_llama_layers`: each decoder layer is norm, attention (q, k, v and o projections, RoPE, no q/k norm),
      residual, norm, MLP, residual, so locret's own decode step (`core/answer/decode_step.py`) and the compiled one
      run it; a config that sets a sliding window still decodes through the model's forward.
    - `fused_qkv`: its attention holds one projection for q, k and v (Phi-3's), not three.
    - `sliding_layers`: it mixes sliding-window layers with global ones, each kind with its own RoPE (Gemma 3).
    """

    model_type: str
    name: str
    gguf_architecture: str | None
    plain_llama_layers: bool = False
    fused_qkv: bool = False
    sliding_layers: bool = False


FAMILIES = {family.model_type: family for family in (
    Family("llama", "Llama", "llama", plain_llama_layers=True),
    Family("mistral", "Mistral", "mistral", plain_llama_layers=True),
    Family("qwen2", "Qwen2", "qwen2", plain_llama_layers=True),
    Family("qwen3", "Qwen3", "qwen3"),  # q and k RMSNorm after their projections
    Family("phi3", "Phi-3", "phi3", fused_qkv=True),
    Family("gemma3_text", "Gemma 3", "gemma3", sliding_layers=True),
)}
GGUF_ARCHITECTURES = tuple(f.gguf_architecture for f in FAMILIES.values() if f.gguf_architecture is not None)
PLAIN_LLAMA = tuple(f for f in FAMILIES.values() if f.plain_llama_layers)


def family_of(config) -> Family:
    """The family of a transformers config (of its text decoder, for a model that has other parts); any other is
    refused in one line naming the supported ones."""
    model_type = config.get_text_config(decoder=True).model_type
    if model_type not in FAMILIES:
        raise ModelError(f"model type {model_type!r} is not supported; locret handles {', '.join(FAMILIES)}")
    return FAMILIES[model_type]


def has_plain_llama_layers(model_type: str) -> bool:
    """Whether `model_type` is a family whose decoder layers are the plain Llama shape (a model of any other type,
    supported or not, is not)."""
    family = FAMILIES.get(model_type)
    return family is not None and family.plain_llama_layers


def spoken(families: Iterable[Family]) -> str:
    """The families' names as a sentence lists them: "Llama, Mistral and Qwen2"."""
    names = [family.name for family in families]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
