"""Tiny random models of each supported family, built in-process (no network, no downloads), and one saved as a
loadable local model directory."""

from __future__ import annotations

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from helpers.byte_tokenizers import byte_tokenizer

VOCAB = 300
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=4096,
    eos_token_id=1,
    bos_token_id=0,
)


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 512}
ROPE_VARIANTS = {  # the other RoPE scalings locret lists as supported, on the Llama shape
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0},  # scales past max_position_embeddings
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 256},
}


GEMMA3_WINDOW = 8


def tiny_model(family: str, seed: int = 0, rope: dict | None = None, max_positions: int | None = None,
               layers: int = 2):
    """A 2-layer random model of `family`, fp32, eval mode, sdpa attention. `rope` replaces Llama's RoPE scaling;
    `max_positions` its max_position_embeddings (where dynamic NTK starts scaling); `layers` Llama's depth."""
    torch.manual_seed(seed)
    if family == "llama":  # GQA, with Llama 3.1's RoPE scaling unless `rope` says otherwise
        common = {**COMMON, "max_position_embeddings": max_positions or COMMON["max_position_embeddings"],
                  "num_hidden_layers": layers}
        model = LlamaForCausalLM(LlamaConfig(**common, num_key_value_heads=2, rope_parameters=rope or LLAMA3_ROPE))
    elif family == "qwen2":  # GQA, q/k/v biases
        model = Qwen2ForCausalLM(Qwen2Config(**COMMON, num_key_value_heads=2))
    elif family == "qwen3":  # GQA, q/k RMSNorm after the projections, explicit head_dim
        model = Qwen3ForCausalLM(Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16))
    elif family == "mistral":  # no GQA
        model = MistralForCausalLM(MistralConfig(**COMMON, num_key_value_heads=4, sliding_window=None))
    elif family == "phi3":  # fused qkv_proj, longrope switching at 256 positions
        half = COMMON["hidden_size"] // COMMON["num_attention_heads"] // 2
        config = Phi3Config(
            **{**COMMON, "max_position_embeddings": 2048}, num_key_value_heads=4, pad_token_id=0,
            original_max_position_embeddings=256,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "short_factor": [1.0 + 0.05 * i for i in range(half)],
                             "long_factor": [2.0 + 0.3 * i for i in range(half)],
                             "original_max_position_embeddings": 256},
        )
        model = Phi3ForCausalLM(config)
    elif family == "gemma3":  # sliding layers 0 and 1 (window 8) under a global layer 2; RoPE bases per kind
        model = Gemma3ForCausalLM(Gemma3TextConfig(
            **{**COMMON, "num_hidden_layers": 3}, num_key_value_heads=2, head_dim=16, pad_token_id=0,
            sliding_window=GEMMA3_WINDOW, layer_types=["sliding_attention", "sliding_attention", "full_attention"]))
    else:
        raise ValueError(family)
    model.config._attn_implementation = "sdpa"
    model.generation_config = GenerationConfig(eos_token_id=1)
    return model.eval()


def save_model_dir(model, path):
    """Write `model` with a byte-level fast tokenizer (<s>=0, </s>=1, bytes from 2) as a loadable local model."""
    byte_tokenizer().save_pretrained(path)
    model.save_pretrained(path)
    return path
