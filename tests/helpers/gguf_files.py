"""Tiny GGUF files written by the tests themselves with the `gguf` package: a random Llama with a byte-level
tokenizer and a ChatML template, laid out as llama.cpp's converter lays one out (q and k rows permuted)."""

from __future__ import annotations

import numpy as np
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_vocabulary() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return [bytes_to_unicode()[b] for b in range(256)] + ["Ġt", "Ġth"] + SPECIALS


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(byte_vocabulary()), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=len(byte_vocabulary()) - 1)
    return model


def permuted(weight: torch.Tensor, heads: int) -> np.ndarray:
    """llama.cpp's layout of q_proj/k_proj rows (transformers undoes it when it loads the file)."""
    rows = weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2)
    return rows.reshape(weight.shape).numpy().astype(np.float32)


def write_gguf(path, model: LlamaForCausalLM | None = None, architecture: str = "llama") -> LlamaForCausalLM:
    """Write `model` (default: `tiny_llama()`) to `path` as an F32 GGUF file whose header names `architecture`."""
    import gguf

    model = model or tiny_llama()
    c = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_vocab_size(c.vocab_size)
    tokens = byte_vocabulary()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    writer.add_token_merges(["Ġ t", "Ġt h"])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_chat_template(CHATML)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(c.num_hidden_layers):
        for hf, gg in parts.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    for hf, gg in names.items():
        tensor = state[hf]
        if ".attn_q." in gg:
            array = permuted(tensor, c.num_attention_heads)
        elif ".attn_k." in gg:
            array = permuted(tensor, c.num_key_value_heads)
        else:
            array = tensor.numpy().astype(np.float32)
        writer.add_tensor(gg, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model
