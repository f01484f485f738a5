"""Train the embedded model's BPE tokenizer and write it as tiktoken ranks.

The trainer is the `tokenizers` library's BPE, pre-splitting text with locret's own pattern (digits one at a time),
so every learned merge is one tiktoken can apply. Ranks: the 256 single bytes first, then merges in the order
learned, which is the order tiktoken applies them.
"""

from __future__ import annotations

import json
import random

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

from locret_cli.bench.synthetic import paragraphs, reference_text, word_salad
from locret_cli.inputs.tokenizer import SPLIT_PATTERN, TiktokenTokenizer
from recipes.embedded.qa_data import facts_for


def training_texts(seed: int) -> list[str]:
    """What the merges are learned from: every filler source and many fact statements and questions."""
    rng = random.Random(seed)
    texts = ["\n\n".join(paragraphs(rng, 400)), reference_text("train"), word_salad(rng, 20000)]
    facts = [fact for _ in range(3000) for fact in facts_for(rng, "train", 2, passkey_chance=0.3)]
    texts.append("\n".join(f"{f.statement}\nQuestion: {f.question}\n{f.answer}" for f in facts))
    return texts


def train_tokenizer(seed: int, vocab_size: int) -> TiktokenTokenizer:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator(training_texts(seed), trainer)
    to_byte = {char: byte for byte, char in _byte_to_char().items()}
    ranks = {bytes([b]): b for b in range(256)}
    for pair in json.loads(bpe.to_str())["model"]["merges"]:
        left, right = pair.split(" ") if isinstance(pair, str) else pair
        token = bytes(to_byte[c] for c in left + right)
        ranks.setdefault(token, len(ranks))
    return TiktokenTokenizer(ranks)


def _byte_to_char() -> dict[int, str]:
    """GPT-2's printable stand-ins for bytes, which byte-level BPE vocabularies are written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping
