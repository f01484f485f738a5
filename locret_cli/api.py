"""The Python API: load a model once, then ask questions of documents.

    from locret_cli.api import load_session
    session = load_session("Qwen/Qwen2.5-1.5B-Instruct", heads="./heads")
    result = session.ask("book.pdf", "Who signed the treaty?")
    print(result.answer, [source.label() for source in result.sources])

    reading = session.read("book.pdf")          # read once,
    for question in ("Who signed it?", "When?"):  # ask many times
        print(reading.ask(question).answer)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import BinaryIO

from locret_cli.documents import Document, open_document, token_chunks
from locret_cli.engine import QUESTION_ALLOWANCE, Engine, Progress, Settings
from locret_cli.errors import LocretError
from locret_cli.heads import RetainingHeads, load_heads
from locret_cli.loading import LoadedModel, load_model
from locret_cli.measure import check_fits, human_bytes, plan_memory, reset_peak
from locret_cli.models.shipped import find_shipped
from locret_cli.policies import Policy, make_policy
from locret_cli.prompt import prompt_layout, stop_token_ids
from locret_cli.reading import SOURCES_SHOWN, AskResult, DocumentInfo, Reading
from locret_cli.rope import changes_with_length, rotary_module
from locret_cli.sources import SourceMap
from locret_cli.speed.packed_linear import pack_if_room


@dataclass
class Session:
    """A loaded model, its tokenizer and (for the locret policy) its heads."""

    loaded: LoadedModel
    heads: RetainingHeads | None
    policy: str = "locret"
    question_warning: Callable[[str], str | None] | None = None  # the embedded model's check of a question's form
    not_stated: Callable[[str], bool] | None = None  # whether an answer says the document is silent (embedded model)

    def settings(self, warn: Callable[[str], None] = lambda _: None, **overrides) -> Settings:
        """Settings from, in order: non-None `overrides`, the model's recorded defaults, the global defaults."""
        known = {f.name for f in fields(Settings)}
        chosen = {k: v for k, v in self.loaded.defaults.items() if k in known}
        chosen.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(chosen) - known
        if unknown:
            raise LocretError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return Settings(**chosen).checked(warn)

    def read(
        self,
        source: str | Document,
        settings: Settings | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        encoding: str | None = None,
        stdin: BinaryIO | None = None,
        force: bool = False,
        policy: Policy | None = None,
    ) -> Reading:
        """Read `source` (an opened Document, a path, or `-` for stdin) once into a bounded cache; ask the Reading
        as many questions as you like. Refuses (LocretError) a run estimated not to fit in free memory, unless
        `force`. `policy` replaces the session's own (an evaluation's oracle, say)."""
        warnings: list[str] = []
        settings = settings.checked(warnings.append) if settings else self.settings(warnings.append)
        document = source if isinstance(source, Document) else open_document(source, encoding=encoding, stdin=stdin)
        model, tokenizer = self.loaded.model, self.loaded.tokenizer
        prefix = prompt_layout(tokenizer).head_ids
        policy = policy or make_policy(self.policy, model, self.heads, settings.score_pool)
        if not force:
            self.check_memory(policy, settings, document, QUESTION_ALLOWANCE)
        compute = self.prepare()
        engine = Engine(model, policy, settings, stop_token_ids(model, tokenizer), pinned=len(prefix))
        source_map = SourceMap("page" if document.kind == "pdf" else "lines")
        reset_peak(model.device)
        started = engine.clock()
        engine.read(token_chunks(document, tokenizer, settings.chunk_size, prefix, source_map), on_progress)
        read_s = engine.clock() - started
        info = DocumentInfo(document.name, document.kind, engine.document_tokens - len(prefix), document.pages,
                            document.sha256, document.size_bytes, read_s)
        return Reading(engine, tokenizer, self.loaded.name, prefix, source_map, info, read_s,
                       warnings=warnings + document.warnings, compute=compute,
                       question_warning=self.question_warning, not_stated=self.not_stated)

    def ask(
        self,
        source: str | Document,
        question: str,
        settings: Settings | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        encoding: str | None = None,
        stdin: BinaryIO | None = None,
        force: bool = False,
        sources: int = SOURCES_SHOWN,
    ) -> AskResult:
        """Read `source` and answer `question` from it: `read(...).ask(question)`."""
        if not question.strip():
            raise LocretError("the question is empty")
        return self.read(source, settings, on_progress, encoding, stdin, force).ask(question, sources=sources)

    def load(self, path: str) -> Reading:
        """The Reading saved at `path` by `Reading` + `save_reading` (`locret read -o`), without the document."""
        from locret_cli.saved_context import load_reading

        reading = load_reading(path, self.loaded.model, self.loaded.tokenizer, self.loaded.name, self.heads)
        reading.compute = self.prepare()
        reading.question_warning = self.question_warning
        reading.not_stated = self.not_stated
        return reading

    def prepare(self) -> str:
        """Pack the model's bf16 linears for oneDNN where that pays and fits (`speed/packed_linear.py`); returns
        how the model computes, for the cost table."""
        packed = pack_if_room(self.loaded.model)
        dtype = self.loaded.dtype_reason or str(self.loaded.model.dtype).removeprefix("torch.")
        return f"{dtype}; linear weights packed for oneDNN (+{human_bytes(packed)})" if packed else dtype

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
        keys_move = (policy.evicts and settings.positions == "compact") or changes_with_length(
            rotary_module(self.loaded.model))
        plan = plan_memory(self.loaded.model, entries, settings.chunk_size, hidden, keys_move)
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
    heads_required: bool = True,
) -> Session:
    """Load a model (the embedded default when `model` is None) and the heads the policy needs: `heads`, else those
    shipped for this model (`models/shipped.py`), whose recorded engine settings then become the defaults (for every
    policy). A session that only answers from saved contexts needs no heads: pass heads_required=False."""
    if model is None:
        from locret_cli.embedded import load_embedded, question_warning, says_not_stated

        if load_4bit:
            raise LocretError("--load-4bit applies to --model; the embedded model is already tiny")
        loaded, embedded_heads = load_embedded(device, dtype)
        chosen_heads = load_heads(heads, loaded.model) if heads else embedded_heads
        return Session(loaded, chosen_heads, policy, question_warning, says_not_stated)
    loaded = load_model(model, device, dtype, load_4bit, trust_remote_code)
    shipped = None if heads else find_shipped(loaded.model)
    if shipped is not None:
        loaded.defaults = shipped.defaults
    chosen_heads = load_heads(heads or shipped.directory, loaded.model) if heads or shipped else None
    if policy == "locret" and chosen_heads is None and heads_required:
        raise LocretError(
            "the locret policy needs retaining heads for this model: pass --heads DIR "
            "(train them with `locret train`), or choose --policy streaming or full"
        )
    return Session(loaded, chosen_heads, policy)


__all__ = ["AskResult", "Reading", "Session", "load_session"]
