"""A document for reads left pending, and the settings and questions that locate an answer in it or do not."""

from __future__ import annotations

from helpers.byte_tokenizers import byte_tokenizer
from helpers.models import tiny_model
from locret_cli.api import Session
from locret_cli.models.loading import LoadedModel
from locret_cli.settings import AnswerSettings, ReadSettings

# Byte tokens: "QZX" and "?" occur nowhere else, so only that question names a window.
TEXT = "".join(f"Line {i}: the lamp of room {i} is {i * 7 % 100}.\n" for i in range(60)) + \
    "The vault of the tower is QZX.\n" + \
    "".join(f"Line {i}: the lamp of room {i} is {i * 7 % 100}.\n" for i in range(60, 120))
SETTINGS = ReadSettings(policy="streaming", budget=96, chunk_size=64, stabilizers=16)
WORDS = AnswerSettings(max_new_tokens=4, reread=1, reread_tokens=48, locate="words")
LOCATED, UNLOCATED = "Where is QZX?", "Which lamp is in room 93"


def session_and_document(folder) -> tuple[Session, str]:
    """A streaming session of a tiny Llama with the byte tokenizer, and TEXT written as a text file in `folder`."""
    session = Session(LoadedModel(tiny_model("llama"), byte_tokenizer(), "tiny llama", {"policy": "streaming"}), None)
    path = folder / "doc.txt"
    path.write_text(TEXT)
    return session, str(path)
