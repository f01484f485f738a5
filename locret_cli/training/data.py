"""Training records for retaining heads: JSONL of prompt/answer, or ShareGPT-style JSON conversations.

Bad records are reported by line (JSONL) or index (JSON) and skipped; if nothing usable remains, loading fails with
one clear error. Prompts are laid out as `locret ask` lays them out (`prompt.prompt_layout`: the template's head,
the prompt as text, the template's tail), and the prompt is cut in the middle so the whole fits `max_len` tokens,
keeping the start and the question at the end. Answers end with the token the template ends a turn with.

A record may also name passages of its prompt that eviction must keep whatever the question: `"keep": ["is 4821.",
...]`, each found at its first place in the prompt. Their tokens become the example's `keep` indices, which
`--keep-weight` ranks above the rest (`trainer.keep_loss`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from locret_cli.errors import LocretError, SettingError
from locret_cli.inputs.prompt import end_of_turn_id, prompt_layout
from locret_cli.inputs.tokenizer import encode_text, encode_text_with_offsets

ASSISTANT_ROLES = {"gpt", "assistant", "model", "bot"}


@dataclass
class Record:
    prompt: str
    answer: str
    keep: list[str] = field(default_factory=list)  # passages of the prompt to keep whatever the question


@dataclass
class TokenizedExample:
    prompt_ids: list[int]
    answer_ids: list[int]
    keep: list[int] = field(default_factory=list)  # indices into prompt_ids of the `keep` passages' tokens


def load_records(path: str | Path, warn) -> list[Record]:
    """Read `path`; each skipped record is reported through `warn` with where it was."""
    path = Path(path)
    if not path.is_file():
        raise LocretError(f"no such data file: {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.strip():
        raise LocretError(f"{path} is empty")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LocretError(f"{path} is not valid JSON: {exc}") from None
        located = [(f"index {i}", item) for i, item in enumerate(items)]
    else:
        located = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                located.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError:
                warn(f"{path} line {number}: not valid JSON, skipped")
    records = []
    for where, item in located:
        record, problem = _record(item)
        if record is None:
            warn(f"{path} {where}: {problem}, skipped")
        else:
            records.append(record)
    if not records:
        raise LocretError(f"{path} has no usable records: each needs 'prompt' and 'answer', or 'conversations'")
    return records


def _record(item) -> tuple[Record | None, str]:
    if not isinstance(item, dict):
        return None, "not an object"
    if "conversations" in item:
        turns = item["conversations"]
        if not isinstance(turns, list) or not all(isinstance(t, dict) and "value" in t for t in turns):
            return None, "'conversations' must be a list of {from, value} turns"
        last = max((i for i, t in enumerate(turns) if str(t.get("from", "")).lower() in ASSISTANT_ROLES), default=None)
        if last is None or last == 0:
            return None, "no assistant turn after a prompt"
        prompt = "\n\n".join(str(t["value"]) for t in turns[:last])
        answer = str(turns[last]["value"])
    else:
        prompt, answer = item.get("prompt"), item.get("answer")
        if not isinstance(prompt, str) or not isinstance(answer, str):
            return None, "needs string fields 'prompt' and 'answer'"
    if not prompt.strip() or not answer.strip():
        return None, "empty prompt or answer"
    keep = item.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) and k for k in keep):
        return None, "'keep' must be a list of non-empty strings"
    missing = next((k for k in keep if k not in prompt), None)
    if missing is not None:
        return None, f"'keep' passage {missing[:40]!r} is not in the prompt"
    return Record(prompt, answer, keep), ""


def tokenize(records: list[Record], tokenizer, model, max_len: int) -> list[TokenizedExample]:
    """Prompt ids laid out as at inference (the prompt's middle cut so all fits `max_len`) and answer ids ending in
    the end-of-turn token. Record text is data: special-token strings in it stay text."""
    layout = prompt_layout(tokenizer)
    end = end_of_turn_id(tokenizer, model)
    room = max_len - len(layout.head_ids) - len(layout.tail_ids)
    if room < 2:
        raise SettingError("{max_len} {value} leaves no room for a prompt inside this model's chat template", value=max_len)
    examples = []
    for record in records:
        content, kept = _encode_marking(tokenizer, record.prompt, record.keep)
        if len(content) > room:
            head, tail = room // 2, len(content) - (room - room // 2)
            content, kept = content[:head] + content[tail:], kept[:head] + kept[tail:]
        answer_ids = encode_text(tokenizer, record.answer) + [end]
        keep = [len(layout.head_ids) + i for i, marked in enumerate(kept) if marked]
        examples.append(TokenizedExample(layout.head_ids + content + layout.tail_ids, answer_ids, keep))
    return examples


def _encode_marking(tokenizer, text: str, passages: list[str]) -> tuple[list[int], list[bool]]:
    """`text`'s ids, and for each token whether it overlaps one of `passages` (each at its first place in `text`)."""
    if not passages:
        ids = encode_text(tokenizer, text)
        return ids, [False] * len(ids)
    ids, starts = encode_text_with_offsets(tokenizer, text)
    ends = starts[1:] + [len(text)]
    spans = [(text.index(p), text.index(p) + len(p)) for p in passages]
    return ids, [any(s < b and a < e for a, b in spans) for s, e in zip(starts, ends)]
