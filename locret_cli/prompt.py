"""The token ids that surround the document: the chat template's head before it, the question and tail after it."""

from __future__ import annotations

from dataclasses import dataclass

_MARKER = "\x00LOCRET-DOCUMENT\x00"


@dataclass
class PromptParts:
    """prefix_ids go before the document (streamed with it); question_ids after it (prefilled without eviction)."""

    prefix_ids: list[int]
    question_ids: list[int]


def question_text(question: str) -> str:
    """What follows the document inside the user's message."""
    return f"\n\nQuestion: {question.strip()}"


def build_prompt(tokenizer, question: str) -> PromptParts:
    """Split the rendered prompt at the document: the template is applied when the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": _MARKER + question_text(question)}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        head, tail = rendered.split(_MARKER)
        return PromptParts(_encode(tokenizer, head), _encode(tokenizer, tail))
    bos = getattr(tokenizer, "bos_token_id", None)
    return PromptParts([bos] if bos is not None else [], _encode(tokenizer, question_text(question) + "\nAnswer:"))


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def stop_token_ids(model, tokenizer) -> set[int]:
    """End tokens from the tokenizer and the model's generation config (which may list several)."""
    ids = set()
    for source in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids
