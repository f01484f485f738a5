"""Byte-level fast tokenizers built in-process: the plain one, and one with Llama 3.1's control tokens and chat
template."""

from __future__ import annotations


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
