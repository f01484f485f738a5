"""The model `locret ask` uses when no --model is given, shipped inside the package.

A 3.7M-parameter Llama trained from scratch on generated documents by `python -m scripts.build_embedded`, its
tiktoken BPE tokenizer, its retaining heads (trained with `locret train`) and the engine settings recorded with it
(`locret.json`). It is a demonstration that the method works: it finds facts stated in a long document under a tight
budget. It knows nothing else; real questions about real books need a real model through --model.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from locret_cli.errors import LocretError
from locret_cli.heads import RetainingHeads, load_heads
from locret_cli.loading import LoadedModel, load_model

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded_model"
NAME = "embedded demo model (3.7M, trained on synthetic documents)"
QUESTION_FORMS = (re.compile(r"What is the pass key\?"), re.compile(r"What is the \S.* of \S.*\?"))


def question_warning(question: str) -> str | None:
    """Why an answer to `question` cannot be trusted, when it is not of a form the embedded model was trained on
    (`synthetic.py`: "What is the <attribute> of <entity>?" and "What is the pass key?"); None when it is."""
    if any(form.fullmatch(question.strip()) for form in QUESTION_FORMS):
        return None
    return ('the embedded demo model was trained only on "What is the <attribute> of <entity>?" and "What is the '
            'pass key?"; its answer to another question is unreliable (pass a real model with --model)')


def load_embedded(device: str = "auto", dtype: str = "auto") -> tuple[LoadedModel, RetainingHeads]:
    """The embedded model, tokenizer, heads and recorded defaults, from package data; nothing is downloaded."""
    if not (EMBEDDED_DIR / "model.safetensors").is_file():
        raise LocretError(f"the embedded model is missing from {EMBEDDED_DIR}; reinstall locret-cli")
    loaded = load_model(str(EMBEDDED_DIR), device=device, dtype=dtype)
    loaded.name = NAME
    loaded.defaults = json.loads((EMBEDDED_DIR / "locret.json").read_text())
    return loaded, load_heads(EMBEDDED_DIR / "heads", loaded.model)
