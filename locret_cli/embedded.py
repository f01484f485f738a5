"""The model `locret ask` uses when no --model is given.

Until the project's trained embedded model lands, this is a placeholder built deterministically from a seed: a tiny
Llama with random weights, a byte-level tiktoken tokenizer and random retaining heads. It exercises the whole
pipeline offline (streaming, scoring, eviction, decoding, reporting), but its answers are noise.
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from locret_cli.heads import RetainingHeads
from locret_cli.loading import LoadedModel, resolve_device, resolve_dtype
from locret_cli.tokenizer import TiktokenTokenizer

NAME = "embedded placeholder (random weights: answers are noise)"
SEED = 0
DEFAULTS = {"budget": 1024, "chunk_size": 512, "stabilizers": 256, "max_new_tokens": 24}


def load_embedded(device: str = "auto", dtype: str = "auto") -> tuple[LoadedModel, RetainingHeads]:
    """The placeholder model, tokenizer and heads, identical on every machine for a given dtype."""
    tokenizer = TiktokenTokenizer.byte_level()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id)
    torch_device = resolve_device(device)
    model = model.to(device=torch_device, dtype=resolve_dtype(dtype, torch_device)).eval()
    heads = RetainingHeads.for_model(model, hidden=64).eval()
    return LoadedModel(model, tokenizer, NAME, dict(DEFAULTS)), heads
