"""Models of real shapes with random weights: speed and memory are real, answers are meaningless.

Each preset copies the public config values of a model (layers, widths, heads, KV heads, vocabulary, RoPE), so
throughput and memory can be measured for the shapes that matter without downloading anything.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, GenerationConfig, LlamaConfig, Phi3Config, Qwen2Config

from locret_cli.core.heads import RetainingHeads, compute_dtype
from locret_cli.errors import LocretError
from locret_cli.inputs.tokenizer import TiktokenTokenizer
from locret_cli.models.loading import LoadedModel, bits, choose_dtype, quantize, resolve_device
from locret_cli.runtime import bf16_weights

PRESETS = {
    # HuggingFaceTB/SmolLM2-135M-Instruct
    "smollm2-135m": lambda: LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        vocab_size=49152, max_position_embeddings=8192, rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True, rms_norm_eps=1e-5,
    ),
    # Qwen/Qwen2.5-0.5B-Instruct
    "qwen2.5-0.5b": lambda: Qwen2Config(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        vocab_size=151936, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True, rms_norm_eps=1e-6,
    ),
    # Qwen/Qwen2.5-1.5B-Instruct (the Coder model has the same shape)
    "qwen2.5-1.5b": lambda: Qwen2Config(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        vocab_size=151936, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=True, rms_norm_eps=1e-6,
    ),
    # meta-llama/Llama-3.2-1B-Instruct
    "llama-3.2-1b": lambda: LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, max_position_embeddings=131072, rope_parameters=_llama3_rope(32.0),
        tie_word_embeddings=True, rms_norm_eps=1e-5,
    ),
    # meta-llama/Llama-3.1-8B-Instruct
    "llama-3.1-8b": lambda: LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, max_position_embeddings=131072, rope_parameters=_llama3_rope(8.0),
        tie_word_embeddings=False, rms_norm_eps=1e-5,
    ),
    # microsoft/Phi-3-mini-128k-instruct. Its 48 published short/long longrope factors are not copied here: they
    # change the rotation angles, not the cost, so the factors are 1.0 and only the shape, the longrope type, its
    # switch past 4,096 positions and its attention scaling are the real model's.
    "phi-3-mini-128k": lambda: Phi3Config(
        hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        vocab_size=32064, max_position_embeddings=131072, original_max_position_embeddings=4096,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 48,
                         "long_factor": [1.0] * 48, "factor": 32.0, "original_max_position_embeddings": 4096},
        tie_word_embeddings=False, rms_norm_eps=1e-5, sliding_window=None, pad_token_id=None, bos_token_id=None,
        eos_token_id=None,
    ),
    # google/gemma-3-{1b,4b,12b}-it's text models: five sliding layers to each global one; "-global" is the same
    # shape with every layer global, to measure what the sliding layers save
    **{f"gemma3-{size}{variant}": (lambda size=size, variant=variant: _gemma3(*GEMMA3_SHAPES[size],
                                                                               global_only=bool(variant)))
       for size in ("1b", "4b", "12b") for variant in ("", "-global")},
}

# hidden, intermediate, layers, heads, KV heads, vocabulary, sliding window, positions, global RoPE scaling
GEMMA3_SHAPES = {
    "1b": (1152, 6912, 26, 4, 1, 262144, 512, 32768, None),
    "4b": (2560, 10240, 34, 8, 4, 262208, 1024, 131072, 8.0),
    "12b": (3840, 15360, 48, 16, 8, 262208, 1024, 131072, 8.0),
}


def _gemma3(hidden, intermediate, layers, heads, kv_heads, vocab, window, positions, scaling, global_only=False):
    rope = {"rope_type": "linear", "rope_theta": 1000000.0, "factor": scaling} if scaling else \
        {"rope_type": "default", "rope_theta": 1000000.0}
    kinds = ["full_attention" if global_only or (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    return Gemma3TextConfig(
        hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, head_dim=256, query_pre_attn_scalar=256, vocab_size=vocab,
        sliding_window=window, layer_types=kinds, max_position_embeddings=positions,
        rope_parameters={"full_attention": rope, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        tie_word_embeddings=True, rms_norm_eps=1e-6,
    )


def _llama3_rope(factor: float) -> dict:
    return {"rope_type": "llama3", "rope_theta": 500000.0, "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def preset_config(preset: str):
    """The transformers config of shape preset `preset`."""
    if preset not in PRESETS:
        raise LocretError(f"unknown shape preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[preset]()


def random_model(preset: str, dtype: torch.dtype = torch.float32, seed: int = 0,
                 device: torch.device | str = "cpu"):
    """A randomly initialised model of `preset`'s shape on `device`, in eval mode. Its weights are drawn where they
    will run: an 8B shape is drawn on a GPU in seconds, where the CPU would take minutes and twice the memory."""
    config = preset_config(preset)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    model.generation_config = GenerationConfig(eos_token_id=TiktokenTokenizer.byte_level().eos_token_id)
    return model


def random_session_parts(preset: str, device: str = "auto", dtype: str = "auto",
                         load_8bit: bool = False, load_int4: bool = False) -> tuple[LoadedModel, RetainingHeads]:
    """A random-weights model of `preset`'s shape on `device` (its linear weights in int8 with `load_8bit`, in 4 bits
    with `load_int4`), a
    byte-level tokenizer and random heads: the parts of a session that measures speed and memory without downloading
    anything."""
    where = resolve_device(device)
    chosen = choose_dtype(dtype, where)
    widened = bf16_weights.applies(where, chosen.dtype)  # as a bf16 checkpoint would load
    model = random_model(preset, torch.bfloat16 if widened else chosen.dtype, device=where)
    if widened:
        bf16_weights.keep_bf16_weights(model)
    linear_bits = bits(load_8bit, load_int4)
    quantized = quantize(model, linear_bits)
    torch.manual_seed(0)
    heads = RetainingHeads.for_model(model).to(device=where, dtype=compute_dtype(model)).eval()
    kept = "; weights quantized from bf16" if linear_bits else "; weights kept bf16 as stored"
    reason = chosen.reason + (kept if widened else "") + quantized
    loaded = LoadedModel(model, TiktokenTokenizer.byte_level(), f"{preset} shape, random weights", {}, reason)
    return loaded, heads
