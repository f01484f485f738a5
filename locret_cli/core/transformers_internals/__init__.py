"""Every internal of transformers that locret relies on, behind one front door: a release that moves one of them is
a change in this package and nowhere else (`.ci/run` runs the core tests against the newest release and the pinned
one). Nothing outside it names a model's submodules, a forward's keyword arguments or a module of transformers.

- `registry`: the cache a model's attention appends to (`Cache`, `CacheLayerMixin`) and the keyword a forward takes
  it by; attention implementations (registering one, running one for a block, the one in force, transformers' SDPA).
- `tree`: where a model keeps its parts: attention layers and their projections, decoder layers (and what each
  adds to the residual stream), the rotary embedding, a Llama-family decoder's modules in call order and
  its modeling file's own functions, the units of weights placed whole, the names of checkpoint tensors and of
  linears.
- `calls`: what hooks see of a forward's keyword arguments, a decoder layer's arguments cut to some tokens, the
  activation functions by name, and the GGUF reader's progress bar.

Each name is imported from its module on first use, so a caller that needs only `tree` (the checks before a model
loads) does not pay for importing transformers' modeling code.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "calls": ("activation_function", "has_activation", "layer_call_for", "model_call_tokens", "quiet_gguf_conversion"),
    "registry": ("Cache", "CacheLayerMixin", "attention_implementation", "attention_in_force", "cache_kwargs",
                 "implementation_of", "register_attention", "sdpa_attention_forward"),
    "tree": ("ADAPTED_LINEARS", "SIBLING_LINEARS", "LlamaDecoder", "LlamaLayer", "attention_layers",
             "decoder_functions", "decoder_layers", "decoder_parameters", "decoder_stack", "llama_decoder",
             "projections", "residual_writers", "rotary_module", "sampled_weight_names", "untie", "weight_blocks"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str):
    if name not in _HOME_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME_OF[name]}"), name)


def __dir__() -> list[str]:
    return __all__
