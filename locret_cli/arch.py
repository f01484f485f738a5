"""Models of real shapes with random weights: speed and memory are real, answers are meaningless.

Each preset copies the public config values of a model (layers, widths, heads, KV heads, vocabulary, RoPE), so
throughput and memory can be measured for the shapes that matter without downloading anything.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig

from locret_cli.errors import LocretError
from locret_cli.heads import RetainingHeads
from locret_cli.tokenizer import TIKTOKEN_FILE, TiktokenTokenizer

PRESETS = {
    # HuggingFaceTB/SmolLM2-135M-Instruct
    "smollm2-135m": lambda: LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        vocab_size=49152, max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True, rms_norm_eps=1e-5,
    ),
}


def random_model(preset: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """A randomly initialised model of `preset`'s shape, in eval mode."""
    if preset not in PRESETS:
        raise LocretError(f"unknown shape preset {preset!r}; choose one of {', '.join(PRESETS)}")
    config = PRESETS[preset]()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    model.generation_config = GenerationConfig(eos_token_id=TiktokenTokenizer.byte_level().eos_token_id)
    return model


def write_random_model(preset: str, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Save a random `preset` model, a byte-level tokenizer and random heads (in `heads/`) as a local model dir."""
    directory = Path(directory)
    model = random_model(preset, dtype)
    model.save_pretrained(directory)
    TiktokenTokenizer.byte_level().save(directory / TIKTOKEN_FILE)
    RetainingHeads.for_model(model).save(directory / "heads", extra={"note": "random weights"})
    return directory
