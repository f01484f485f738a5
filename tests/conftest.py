"""Helpers the tests share: tiny random models of each supported family, built in-process (no network, no
downloads), the CLI's shared document and `ask`, filler text, and the reference masked attention."""

from __future__ import annotations

import os
import random
import textwrap

import pytest
import torch
import torch.nn.functional as F
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
from typer.testing import CliRunner

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LOCRET_CACHE_DIR"] = ""  # no converted copies of GGUF files under the user's home; tests that want one set it
torch.set_num_threads(min(2, torch.get_num_threads()))

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


@pytest.fixture(params=["llama", "qwen2", "mistral"])
def family_model(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def embedded_session():
    """A session of the embedded model, loaded once per test module."""
    from locret_cli.api import load_session

    return load_session(device="cpu")


@pytest.fixture
def llama():
    return tiny_model("llama")


def byte_tokenizer(**special):
    """A byte-level fast tokenizer: <s>=0, </s>=1, bytes from 2, then any extra special tokens in `special`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<s>": 0, "</s>": 1, **{ch: i + 2 for i, ch in enumerate(alphabet)}}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", **special)


# Llama 3.1's chat template, cut to what a user turn needs: a real Jinja program, rendered by transformers.
LLAMA31_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)
LLAMA31_SPECIALS = ["<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def llama31_chat_tokenizer():
    """The byte tokenizer with Llama 3.1's control tokens and its chat template: `<|end_of_text|>` (258, EOS) sits
    below `<|eot_id|>` (261) as in the real vocabulary; BOS is `<|begin_of_text|>` (262)."""
    tokenizer = byte_tokenizer(additional_special_tokens=LLAMA31_SPECIALS)
    tokenizer.add_special_tokens({"bos_token": "<|begin_of_text|>"})
    tokenizer.bos_token, tokenizer.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
    tokenizer.chat_template = LLAMA31_TEMPLATE
    return tokenizer


def save_model_dir(model, path):
    """Write `model` with a byte-level fast tokenizer (<s>=0, </s>=1, bytes from 2) as a loadable local model."""
    byte_tokenizer().save_pretrained(path)
    model.save_pretrained(path)
    return path


# Shared by the CLI's tests and those that drive it: a document over budget + chunk tokens with one fact in it, and
# `ask` through Typer's runner.
FILLER = "The river bends past the old mill, where the miller counts his sacks twice a day. "
DOCUMENT = FILLER * 60 + "The gate code of the north depot is 4821. " + FILLER * 60
GATE = "The gate code of the north depot is 4821."


runner = CliRunner()


def ask(*args, input=None):
    """`locret ask ARGS...` through the CLI runner."""
    from locret_cli.cli import app

    return runner.invoke(app, ["ask", *map(str, args)], input=input)


@pytest.fixture
def doc(tmp_path):
    """DOCUMENT as a text file."""
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    return path


def filler_lines(rng: random.Random, lines: int) -> list[str]:
    """`lines` lines of 80 characters of the synthetic task's filler sentences."""
    from locret_cli.bench.synthetic import filler_sentence

    text = " ".join(filler_sentence(rng) for _ in range(lines * 2))
    return textwrap.wrap(text, 80)[:lines]


def masked(query, key, value):
    """The reference: SDPA with the chunk's mask (causal among the last T entries, every earlier entry visible)."""
    length, entries = query.shape[2], key.shape[2]
    mask = torch.ones(length, entries, dtype=torch.bool).tril(diagonal=entries - length)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
