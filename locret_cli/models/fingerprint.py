"""Short identities of a model, its tokenizer and its heads, so a saved context can be refused by the wrong one.

The model's weights are fingerprinted from an even sample of every tensor (up to 4,096 values each), not hashed
whole: it takes milliseconds on an 8B model, and any retrained or other checkpoint samples differently.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict

import torch

from locret_cli.core.heads import compute_dtype
from locret_cli.core.identity import stored_values
from locret_cli.core.shape import ModelShape
from locret_cli.inputs.prompt import prompt_layout
from locret_cli.inputs.tokenizer import encode_text

SAMPLES_PER_TENSOR = 4096
PROBE_TEXT = "The gate code of the north depot is 4821. Ünïcödé, 数字 and ‘quotes’ — <|im_end|>\n\tend."


def model_identity(model) -> dict:
    """{"shape": layers, heads, sizes; "dtype": the compute dtype; "weights_sha256": the sampled fingerprint}. Weights
    held in another dtype than the model computes in (bf16 weights computing in fp32) are sampled as it computes with
    them, so the model has the identity it has with every weight in its compute dtype."""
    digest, computes_in = hashlib.sha256(), compute_dtype(model)
    for name, tensor in model.state_dict().items():
        flat = stored_values(model, name, tensor).detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // SAMPLES_PER_TENSOR)][:SAMPLES_PER_TENSOR].contiguous().cpu()
        dtype = tensor.dtype
        if dtype == torch.bfloat16 and computes_in == torch.float32:
            sample, dtype = sample.float(), torch.float32
        digest.update(f"{name}|{dtype}|{list(tensor.shape)}|".encode())
        digest.update(sample.view(torch.uint8).numpy())
    return {"shape": asdict(ModelShape.from_config(model.config)), "dtype": str(computes_in),
            "weights_sha256": digest.hexdigest()}


def tokenizer_fingerprint(tokenizer) -> dict:
    """The vocabulary size, and a SHA-256 of how it encodes a probe text and lays out a prompt."""
    layout = prompt_layout(tokenizer)
    probe = [encode_text(tokenizer, PROBE_TEXT), layout.head_ids, layout.tail_ids]
    return {"vocab_size": len(tokenizer), "sha256": hashlib.sha256(repr(probe).encode()).hexdigest()}


def heads_fingerprint(heads) -> dict | None:
    """{"sha256": of every head parameter} or None without heads."""
    if heads is None:
        return None
    digest = hashlib.sha256()
    for name, tensor in heads.state_dict().items():
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy())
    return {"sha256": digest.hexdigest()}
