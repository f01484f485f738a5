"""A tiktoken encoding dressed with the few transformers-tokenizer methods locret uses.

The embedded model's tokenizer is tiktoken ranks shipped as package data; this wrapper lets the engine, the prompt
builder and training treat it like any transformers tokenizer: `encode`, `decode`, `apply_chat_template`,
`eos_token_id`, `bos_token_id` and `chat_template`.
"""

from __future__ import annotations

import base64
from pathlib import Path

import tiktoken

from locret_cli.errors import LocretError

# Splits text like GPT-2: contractions, runs of letters, runs of digits one at a time, punctuation, whitespace.
SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
TIKTOKEN_FILE = "tokenizer.tiktoken"  # a model directory holding this file uses TiktokenTokenizer
SPECIAL_TOKENS = ("<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>")


def encode_text(tokenizer, text: str) -> list[int]:
    """Ids of text that is data (a document, a question, training prompts and answers): a special-token string in it,
    such as `<|im_end|>`, becomes ordinary text tokens, never a control token. Works for transformers tokenizers and
    `TiktokenTokenizer` alike; only a chat template's own rendering may produce control tokens."""
    return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)) if text else []


def encode_text_with_offsets(tokenizer, text: str) -> tuple[list[int], list[int]]:
    """`encode_text`'s ids, and where each token starts in `text` (a character offset), for citing lines.

    A tokenizer that cannot report offsets (a slow, pure-Python one) gets them spread evenly over the text."""
    if not text:
        return [], []
    if isinstance(tokenizer, TiktokenTokenizer):
        ids = tokenizer.encoding.encode_ordinary(text)
        return ids, tokenizer.encoding.decode_with_offsets(ids)[1]
    try:
        encoded = tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    except NotImplementedError:
        ids = encode_text(tokenizer, text)
        return ids, [i * len(text) // len(ids) for i in range(len(ids))]
    return list(encoded["input_ids"]), [start for start, _ in encoded["offset_mapping"]]


class TiktokenTokenizer:
    """tiktoken BPE with a minimal chat format: <|user|>\\n{message}<|end|>\\n<|assistant|>\\n."""

    chat_template = "<|user|>\n{content}<|end|>\n<|assistant|>\n"

    def __init__(self, ranks: dict[bytes, int], name: str = "locret"):
        specials = {token: len(ranks) + i for i, token in enumerate(SPECIAL_TOKENS)}
        self.encoding = tiktoken.Encoding(name, pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
        self.eos_token_id = specials["<|end|>"]
        self.bos_token_id = None
        self.special_ids = set(specials.values())

    @classmethod
    def byte_level(cls) -> "TiktokenTokenizer":
        """No merges: one token per byte. Enough for a placeholder model; real use wants trained ranks."""
        return cls({bytes([i]): i for i in range(256)}, name="locret-bytes")

    @classmethod
    def from_file(cls, path: str | Path) -> "TiktokenTokenizer":
        """Read ranks in tiktoken's file format: one `base64(token) rank` pair per line."""
        ranks = {}
        try:
            for line in Path(path).read_text().splitlines():
                if line:
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
        except (OSError, ValueError) as exc:
            raise LocretError(f"cannot read tokenizer ranks {path}: {exc}") from None
        return cls(ranks)

    def save(self, path: str | Path) -> None:
        """Write the mergeable ranks in tiktoken's file format."""
        ranks = self.encoding._mergeable_ranks
        lines = (f"{base64.b64encode(token).decode()} {rank}" for token, rank in sorted(ranks.items(), key=lambda x: x[1]))
        Path(path).write_text("\n".join(lines) + "\n")

    def __len__(self) -> int:
        return self.encoding.n_vocab

    def get_vocab(self) -> dict[str, int]:
        """Each token's text and id, as transformers' tokenizers give them (bytes that are no text alone show as
        U+FFFD), so the vocabulary's word and digit tokens can be found the same way."""
        ranks = self.encoding._mergeable_ranks
        return {token.decode("utf-8", errors="replace"): rank for token, rank in ranks.items()}

    def encode(self, text: str, add_special_tokens: bool = False, split_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. As in transformers, special-token strings in it become their ids unless
        `split_special_tokens` is True; then they are ordinary text. Untrusted text goes through `encode_text`."""
        if split_special_tokens:
            return self.encoding.encode_ordinary(text)
        return self.encoding.encode(text, allowed_special="all")

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`. Ids past the vocabulary (models often pad theirs) decode to nothing."""
        ids = [i for i in ids if i < self.encoding.n_vocab and not (skip_special_tokens and i in self.special_ids)]
        return self.encoding.decode(ids, errors="replace")

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False, add_generation_prompt: bool = True):
        """Render single-turn user messages in the chat format; only what the engine needs."""
        text = "".join(f"<|{m['role']}|>\n{m['content']}<|end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|assistant|>\n"
        return self.encode(text) if tokenize else text
