"""The token ids around the user's text: the chat template's head before it, and its tail after it.

Only the template's own rendering may produce control tokens. The user's text (the document, the question, a
training prompt) is encoded with `encode_text`, so a `<|im_end|>` inside a document stays ordinary text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from locret_cli.errors import LocretError
from locret_cli.inputs.document_numbers import SPACE_FORMS
from locret_cli.inputs.tokenizer import encode_text

_CONTENT = "\x00LOCRET-CONTENT\x00"  # stands for the user's text while the template is rendered
NO_TEMPLATE_TAIL = "\nAnswer:"  # what follows the user's text when the tokenizer has no chat template


@dataclass
class PromptLayout:
    """head_ids: BOS and the template up to the user's message; tail_ids: the template after it, up to the answer."""

    head_ids: list[int]
    tail_ids: list[int]


@dataclass
class PromptParts:
    """prefix_ids go before the document (streamed with it, never evicted); question_ids after it (prefilled
    without eviction)."""

    prefix_ids: list[int]
    question_ids: list[int]


def with_unstated_reply(question: str, reply: str) -> str:
    """`question` followed by the request to answer `reply` where the text read does not answer it (`say_unstated`):
    what the prompt asks, while checks and rows keep the user's question as given."""
    return f"{question.strip()}\n\nIf the text above does not answer this question, reply only: {reply}"


def question_text(question: str) -> str:
    """What follows the document inside the user's message."""
    return f"\n\nQuestion: {question.strip()}"


def prompt_layout(tokenizer) -> PromptLayout:
    """The template split at the user's message, rendered with the tokenizer's chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        rendered = _render(tokenizer, [{"role": "user", "content": _CONTENT}], add_generation_prompt=True)
        if rendered.count(_CONTENT) != 1:
            raise LocretError("this model's chat template does not place the user's message once; locret cannot "
                              "lay out a prompt with it")
        head, tail = rendered.split(_CONTENT)
        return PromptLayout(_control_ids(tokenizer, head), _control_ids(tokenizer, tail))
    bos = getattr(tokenizer, "bos_token_id", None)
    return PromptLayout([bos] if bos is not None else [], encode_text(tokenizer, NO_TEMPLATE_TAIL))


def build_prompt(tokenizer, question: str) -> PromptParts:
    """The ids before and after the document for `question`, laid out as `prompt_layout` says."""
    layout = prompt_layout(tokenizer)
    return PromptParts(layout.head_ids, encode_text(tokenizer, question_text(question)) + layout.tail_ids)


def conversation_ids(tokenizer, history: Sequence[tuple[str, str]], question: str) -> list[int]:
    """The ids after the document for `question` asked after the earlier turns `history` ((question, answer), oldest
    first). The first question closes the message holding the document; each later one is a message of its own. The
    questions and answers are data (`encode_text`); only the template's own text may hold control tokens."""
    if not history:
        return build_prompt(tokenizer, question).question_ids
    texts = [question_text(history[0][0]), history[0][1]]
    for asked, answered in history[1:]:
        texts += [asked.strip(), answered]
    texts.append(question.strip())
    if not getattr(tokenizer, "chat_template", None):
        ids = []
        for i, text in enumerate(texts):
            is_answer = i % 2 == 1
            ids += encode_text(tokenizer, (" " + text) if is_answer else question_text(text) if i else text)
            if not is_answer:
                ids += encode_text(tokenizer, NO_TEMPLATE_TAIL)
        return ids
    markers = [f"\x00LOCRET-TURN-{i}\x00" for i in range(len(texts))]
    messages = [{"role": "assistant" if i % 2 else "user", "content": m} for i, m in enumerate(markers)]
    rendered = _render(tokenizer, messages, add_generation_prompt=True)
    if any(rendered.count(m) != 1 for m in markers):
        raise LocretError("this model's chat template does not keep every turn of a conversation; ask one question "
                          "at a time instead")
    ids = []
    for marker, text in zip(markers, texts):
        glue, rendered = rendered.split(marker)
        if marker != markers[0]:
            ids += _control_ids(tokenizer, glue)
        ids += encode_text(tokenizer, text)
    return ids + _control_ids(tokenizer, rendered)


def end_of_turn_id(tokenizer, model) -> int:
    """The token that ends an answer: what the chat template writes right after an assistant's message (Llama 3.1:
    `<|eot_id|>`, not `<|end_of_text|>`), else the tokenizer's end-of-sequence token."""
    stops = stop_token_ids(model, tokenizer)
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _CONTENT}]
        rendered = _render(tokenizer, messages, add_generation_prompt=False)
        if rendered.count(_CONTENT) == 1:
            after = _control_ids(tokenizer, rendered.split(_CONTENT)[1])
            if after and after[0] in stops:
                return after[0]
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        return eos
    if not stops:
        raise LocretError("neither the tokenizer nor the model names an end-of-sequence token")
    return min(stops)


def stop_token_ids(model, tokenizer) -> set[int]:
    """End tokens from the tokenizer and the model's generation config (which may list several)."""
    ids = set()
    for source in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return ids


LINE_BREAK_FORMS = ("\n", "Ċ", "<0x0A>")  # a line break in a vocabulary: as text, byte-level BPE, byte fallback


def line_end_ids(tokenizer) -> frozenset[int]:
    """For a model with no chat template (a base model, asked by completion), the tokens holding a line break: its
    answer is the line after "Answer:", and what follows is the model going on with more document. Empty for a chat
    model, whose answer ends with its end-of-turn token."""
    if getattr(tokenizer, "chat_template", None) or not hasattr(tokenizer, "get_vocab"):
        return frozenset()
    candidates = [i for token, i in tokenizer.get_vocab().items() if any(f in token for f in LINE_BREAK_FORMS)]
    return frozenset(i for i in candidates if "\n" in tokenizer.decode([i]))


@functools.lru_cache(maxsize=4)  # one scan of the vocabulary per tokenizer, not per document
def word_ids(tokenizer) -> frozenset[int]:
    """The tokens that are a space and a word of the letters a-z, either case (" pass"): those that `word_repeats`
    off keeps an answer from giving twice in a row. Numbers, punctuation and pieces of words are not among them."""
    if not hasattr(tokenizer, "get_vocab"):
        return frozenset()
    return frozenset(i for token, i in tokenizer.get_vocab().items()
                     if token[:1] in SPACE_FORMS and token[1:].isascii() and token[1:].isalpha())


@dataclass(frozen=True)
class PromptTokens:
    """What reading and answering need of the prompt and the vocabulary: the prompt head's length (`pinned`: read
    first and never evicted), the tokens an answer ends at (`stop_ids`; and `line_ends` once it has begun, for a base
    model), and the tokens that begin a word (`words`, for `word_repeats`)."""

    pinned: int = 0
    stop_ids: frozenset[int] = frozenset()
    line_ends: frozenset[int] = frozenset()
    words: frozenset[int] = frozenset()

    @classmethod
    def of(cls, model, tokenizer) -> "PromptTokens":
        """The prompt tokens of `model` with `tokenizer`."""
        return cls(len(prompt_layout(tokenizer).head_ids), frozenset(stop_token_ids(model, tokenizer)),
                   line_end_ids(tokenizer), word_ids(tokenizer))


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # a template is a program of the model repo's: jinja raises many types
        raise LocretError(f"this model's chat template failed to render: {exc}") from None


def _control_ids(tokenizer, rendered: str) -> list[int]:
    """Ids of text the template itself wrote: its special-token strings are control tokens."""
    return list(tokenizer.encode(rendered, add_special_tokens=False)) if rendered else []
