"""The Python API: load a model once, then ask questions of documents.

    from locret_cli.api import load_session
    session = load_session("Qwen/Qwen2.5-1.5B-Instruct", heads="./heads")
    result = session.ask("book.pdf", "Who signed the treaty?")
    print(result.answer, result.to_json()["kv_cache"])
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import BinaryIO

from locret_cli.documents import Document, open_document, token_chunks
from locret_cli.engine import Engine, Progress, Settings
from locret_cli.errors import LocretError
from locret_cli.heads import RetainingHeads, load_heads
from locret_cli.loading import LoadedModel, load_model
from locret_cli.measure import check_fits, full_cache_bytes, peak_memory, plan_memory, reset_peak
from locret_cli.policies import Policy, make_policy
from locret_cli.prompt import build_prompt, stop_token_ids


@dataclass
class AskResult:
    """An answer and everything it cost. `to_json()` is the `--json` document."""

    answer: str
    model: str
    policy: str
    settings: Settings
    document_tokens: int
    pages: int | None
    cache_kept_tokens: int
    cache_peak_tokens: int
    cache_peak_bytes: int
    full_cache_bytes: int
    memory_peak_bytes: int
    memory_device: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float | None
    time_to_first_token_s: float
    total_s: float
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "answer": self.answer,
            "model": self.model,
            "document": {"tokens": self.document_tokens, "pages": self.pages},
            "budget": self.settings.budget,
            "chunk_size": self.settings.chunk_size,
            "stabilizers": self.settings.stabilizers,
            "score_pool": self.settings.score_pool,
            "positions": self.settings.positions,
            "policy": self.policy,
            "kv_cache": {
                "kept_tokens": self.cache_kept_tokens,
                "peak_tokens": self.cache_peak_tokens,
                "peak_bytes": self.cache_peak_bytes,
                "full_cache_bytes": self.full_cache_bytes,
            },
            "memory": {"peak_bytes": self.memory_peak_bytes, "device": self.memory_device},
            "speed": {
                "prefill_tokens_per_s": self.prefill_tokens_per_s,
                "decode_tokens_per_s": self.decode_tokens_per_s,
                "time_to_first_token_s": self.time_to_first_token_s,
                "total_s": self.total_s,
            },
            "warnings": self.warnings,
        }


@dataclass
class Session:
    """A loaded model, its tokenizer and (for the locret policy) its heads."""

    loaded: LoadedModel
    heads: RetainingHeads | None
    policy: str = "locret"

    def settings(self, warn: Callable[[str], None] = lambda _: None, **overrides) -> Settings:
        """Settings from, in order: non-None `overrides`, the model's recorded defaults, the global defaults."""
        known = {f.name for f in fields(Settings)}
        chosen = {k: v for k, v in self.loaded.defaults.items() if k in known}
        chosen.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(chosen) - known
        if unknown:
            raise LocretError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return Settings(**chosen).checked(warn)

    def ask(
        self,
        source: str | Document,
        question: str,
        settings: Settings | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        encoding: str | None = None,
        stdin: BinaryIO | None = None,
        force: bool = False,
    ) -> AskResult:
        """Answer `question` from `source`: an opened Document, a path, or `-` for stdin.

        Refuses (LocretError) a run estimated not to fit in free memory, unless `force`."""
        started = time.perf_counter()
        if not question.strip():
            raise LocretError("the question is empty")
        warnings: list[str] = []
        settings = settings.checked(warnings.append) if settings else self.settings(warnings.append)
        document = source if isinstance(source, Document) else open_document(source, encoding=encoding, stdin=stdin)
        model, tokenizer = self.loaded.model, self.loaded.tokenizer
        prompt = build_prompt(tokenizer, question)
        policy = make_policy(self.policy, model, self.heads, settings.score_pool)
        if not force:
            self.check_memory(policy, settings, document, len(prompt.question_ids))
        engine = Engine(model, policy, settings, stop_token_ids(model, tokenizer), pinned=len(prompt.prefix_ids))
        reset_peak(model.device)
        chunks = token_chunks(document, tokenizer, settings.chunk_size, prompt.prefix_ids)
        generation = engine.run(chunks, prompt.question_ids, on_progress)
        memory, memory_device = peak_memory(model.device)
        warnings.extend(document.warnings)
        prompt_tokens = generation.document_tokens + generation.question_tokens
        return AskResult(
            answer=tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip(),
            model=self.loaded.name,
            policy=policy.name,
            settings=settings,
            document_tokens=generation.document_tokens - len(prompt.prefix_ids),
            pages=document.pages,
            cache_kept_tokens=generation.cache_kept_tokens,
            cache_peak_tokens=generation.cache_peak_tokens,
            cache_peak_bytes=generation.cache_peak_bytes,
            full_cache_bytes=full_cache_bytes(model, prompt_tokens + len(generation.token_ids)),
            memory_peak_bytes=memory,
            memory_device=memory_device,
            prefill_tokens_per_s=prompt_tokens / generation.time_to_first_token_s,
            decode_tokens_per_s=generation.decode_steps / generation.decode_s if generation.decode_steps else None,
            time_to_first_token_s=generation.time_to_first_token_s,
            total_s=time.perf_counter() - started,
            warnings=warnings,
        )

    def check_memory(self, policy: Policy, settings: Settings, document: Document, question_tokens: int) -> None:
        """Refuse a run estimated not to fit in free memory, naming the setting to lower. A full cache grows with
        the document, so it is estimated only for text files of known size (about 4 bytes per token)."""
        after = question_tokens + settings.max_new_tokens
        if policy.evicts:
            entries = settings.budget + settings.chunk_size + after
        elif document.kind == "text" and document.total_units:
            entries = document.total_units // 4 + after
        else:
            return
        hidden = self.heads.hidden if policy.name == "locret" and self.heads is not None else 0
        plan = plan_memory(self.loaded.model, entries, settings.chunk_size, hidden)
        check_fits(plan, "--budget" if policy.evicts else
                   "the document's length (or use a policy that evicts, such as --policy locret)")


def load_session(
    model: str | None = None,
    heads: str | None = None,
    policy: str = "locret",
    device: str = "auto",
    dtype: str = "auto",
    load_4bit: bool = False,
    trust_remote_code: bool = False,
) -> Session:
    """Load a model (the embedded default when `model` is None) and the heads the policy needs."""
    if model is None:
        from locret_cli.embedded import load_embedded

        if load_4bit:
            raise LocretError("--load-4bit applies to --model; the embedded model is already tiny")
        loaded, embedded_heads = load_embedded(device, dtype)
        chosen_heads = load_heads(heads, loaded.model) if heads else embedded_heads
        return Session(loaded, chosen_heads, policy)
    loaded = load_model(model, device, dtype, load_4bit, trust_remote_code)
    chosen_heads = load_heads(heads, loaded.model) if heads else None
    if policy == "locret" and chosen_heads is None:
        raise LocretError(
            "the locret policy needs retaining heads for this model: pass --heads DIR "
            "(train them with `locret train`), or choose --policy streaming or full"
        )
    return Session(loaded, chosen_heads, policy)


__all__ = ["AskResult", "Session", "load_session"]
