"""Whether two loaded models hold the same weights, whatever precision each was stored or loaded in.

A few values sampled at fixed places of a few tensors are kept with trained heads. The same checkpoint loaded from a
4-bit GGUF, nf4 or bf16 gives nearly the same values there (cosine above 0.99, docs/real-models.md), while another
model of the same shape gives unrelated ones (cosine near 0). Hashes cannot do this: quantization changes every bit.
"""

from __future__ import annotations

import torch

from locret_cli.core.shape import ModelShape
from locret_cli.core.transformers_internals import sampled_weight_names
from locret_cli.errors import LocretError

ROW_SCALE = "_scale"  # an int8 weight's per-row scales are the buffer of its name with this suffix

SAMPLES = 1024
SAME_MODEL = 0.95  # lowest cosine, over the sampled tensors, of the same weights in another precision


def sample_index(numel: int) -> torch.Tensor:
    """SAMPLES flat indices spread evenly from 0 to numel - 1, in integer arithmetic (float32 is not exact past
    2²⁴)."""
    return torch.arange(SAMPLES) * (numel - 1) // (SAMPLES - 1)


def sampled_values(param: torch.Tensor, row_scale: torch.Tensor | None = None) -> list[float]:
    """SAMPLES values of `param` at evenly spaced flat indices of its logical shape. Plain weights are indexed where
    they lie, so an 8B model's embeddings are never copied; 4-bit (bitsandbytes) weights are dequantized first, and
    int8 weights (`runtime/int8_linear.py`) are multiplied by their `row_scale` (out,) where sampled."""
    state = getattr(param, "quant_state", None)
    if state is not None:
        import bitsandbytes.functional as bnbf

        param = bnbf.dequantize_4bit(param.data, state)
    flat = param.detach().reshape(-1)
    index = sample_index(flat.numel()).to(flat.device)
    values = flat[index].float()
    if row_scale is not None:
        values = values * row_scale.detach().float()[index // param.shape[-1]]
    return [round(float(v), 6) for v in values.cpu()]


def weight_samples(model) -> dict[str, list[float]]:
    """{tensor name: sampled values}, for the sampled tensors this model has: as parameters or buffers, or held by a
    module that reads its weight's values from another form (`sampled_weight(index)`: 4-bit weights,
    `runtime/int4_linear.py`)."""
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    wanted = sampled_weight_names(ModelShape.from_config(model.config).layers)
    samples = {name: sampled_values(stored_values(model, name, tensors[name]), tensors.get(name + ROW_SCALE))
               for name in wanted if name in tensors}
    modules = dict(model.named_modules())
    for name in wanted:
        module = modules.get(name.removesuffix(".weight"))
        if name not in samples and hasattr(module, "sampled_weight"):
            values = module.sampled_weight(sample_index(module.in_features * module.out_features))
            samples[name] = [round(float(v), 6) for v in values]
    return samples


def stored_values(model, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, the parameter or buffer `name` of `model`; for one left on disk (`--max-memory`: on the meta device,
    with accelerate's hook that loads it before each forward), its values read through that hook."""
    if tensor.device.type != "meta":
        return tensor
    module_name, _, leaf = name.rpartition(".")
    weights = getattr(getattr(model.get_submodule(module_name), "_hf_hook", None), "weights_map", None)
    if weights is None:
        raise LocretError(f"the weights of {name} are on the meta device, with nothing that loads them")
    return weights[leaf]


def similarity(model, recorded: dict[str, list[float]]) -> float:
    """The lowest cosine between `model`'s samples and `recorded` ones, over the tensors both have (0.0 if none)."""
    return samples_similarity(weight_samples(model), recorded)


def samples_similarity(mine: dict[str, list[float]], recorded: dict[str, list[float]]) -> float:
    """The lowest cosine between two sets of samples, over the tensors both have (0.0 if none)."""
    shared = [name for name in recorded if name in mine]
    if not shared:
        return 0.0
    cosines = [torch.nn.functional.cosine_similarity(torch.tensor(mine[n]), torch.tensor(recorded[n]), dim=0)
               for n in shared]
    return float(min(cosines))


def weights_identity(model) -> dict:
    """What heads record about the model they were trained for: its shape and weight samples."""
    from dataclasses import asdict

    return {"shape": asdict(ModelShape.from_config(model.config)), "weight_samples": weight_samples(model)}


def same_model(model, identity: dict) -> tuple[bool, float]:
    """(match, cosine): `model` has the recorded shape and its samples agree with the recorded ones."""
    if ModelShape(**identity["shape"]) != ModelShape.from_config(model.config):
        return False, 0.0
    cosine = similarity(model, identity["weight_samples"])
    return cosine >= SAME_MODEL, cosine
