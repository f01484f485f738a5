"""Chunked prefill with bounded-cache eviction, then question prefill and decoding (each next token chosen by the
answer settings' rules, `core/answer/sampling.py`).

The functions here never print. Progress goes out through a callback; timings are taken after synchronising the
device, and nothing is warmed up first.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import torch

from locret_cli.core.answer.citations import AttentionTally
from locret_cli.core.answer.compiled_step import decode_step_for
from locret_cli.core.answer.reader import ReaderAdapter, reading_with
from locret_cli.core.answer.sampling import Sampler, repeated_run
from locret_cli.core.attention.capture import capture_qkv
from locret_cli.core.attention.over_cache import applies_to, use_cache_attention
from locret_cli.core.attention.probe import observe_attention
from locret_cli.core.attention.rope import SLIDING, changes_with_length, frequencies_for
from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.heads import compute_dtype
from locret_cli.core.keys_only import keys_and_values_only
from locret_cli.core.lazy_prefill import flowing_tokens, lazy_layers
from locret_cli.core.policies import Policy, select
from locret_cli.core.policies.full import FullPolicy
from locret_cli.core.profile_marks import CAPTURE, FREQUENCIES, mark
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import cache_kwargs, rotary_module
from locret_cli.inputs.document_numbers import DocumentNumbers
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.inputs.sources import TokenChunk
from locret_cli.settings import AnswerSettings, ReadSettings

SLIDE_SLACK = 64  # while answering, a sliding layer drops its oldest entries once it holds this many too many
LAZY_SHAPES = 16  # lazy prefill: at most this many token counts flow above the cut (`flowing_tokens`' step)


@dataclass
class Progress:
    """Sent after every document chunk. `reading` is False while a document is only tokenized for a read left
    pending (`PendingRead`): then no chunk has gone through the model, and the cache is empty."""

    tokens: int
    units_done: int
    first_page: int | None
    last_page: int | None
    cache_tokens: int
    reading: bool = True
    unit: str = "bytes"  # what `units_done` counts: "pages" or "bytes" (the api sets it from the document)
    units_total: int | None = None  # the document's pages or bytes; None when unknown (stdin)


@dataclass
class Generation:
    """What one run produced and what it cost."""

    token_ids: list[int]
    document_tokens: int
    question_tokens: int
    cache_kept_tokens: int  # entries per head once the document is in, before the question
    cache_peak_tokens: int
    cache_peak_bytes: int
    time_to_first_token_s: float  # document and question prefill, and the first token
    decode_s: float
    decode_steps: int


class Engine:
    """Runs one document and question through `model` with `policy`, never holding more than budget + chunk.

    The first `prompt.pinned` tokens read (BOS and the chat template's head, which the first chunk starts with) are
    never evicted, under every policy: a document cannot push the prompt's opening out of the cache.

    A policy that reads with the question (FINCH) gets `question_ids` read after every chunk, at the positions that
    follow it; their entries are dropped before eviction, so the cache never holds them.

    An answer ends at a token of `prompt.stop_ids`, and, once it has begun, at one of `prompt.line_ends` (a base
    model's answer is one line). With `word_repeats` off, a token of `prompt.words` never follows itself. The
    `reader`, if any, is in force for answers only (`core/answer/reader.py`). `room` is the cache entries to reserve
    up front (the plan's; 0: grow as entries come).

    The settings are taken as they are: a run's plan (`api/plan.py`) has checked them for this model and policy."""

    def __init__(self, model, policy: Policy, settings: ReadSettings, prompt: PromptTokens = PromptTokens(),
                 answering: AnswerSettings = AnswerSettings(), *, room: int = 0, question_ids: Sequence[int] = (),
                 reader: ReaderAdapter | None = None):
        layers = model.config.get_text_config(decoder=True).num_hidden_layers
        windows = layer_windows(model.config)
        self.model, self.policy, self.settings, self.prompt = model, policy, settings, prompt
        self.answering, self.reader = answering, reader
        self.read_question_ids = list(question_ids) if policy.reads_question else []
        self.device = model.device
        self.rotary = rotary_module(model)
        self.dynamic_frequencies = changes_with_length(self.rotary)
        self.mask_free = applies_to(model)  # attention over the cache without a mask (`attention/over_cache.py`)
        self.step = decode_step_for(model)  # one token's forward: our own glue, or compiled whole
        self.cache = LocretCache(layers, reserved=room, step=settings.chunk_size, kv_bits=settings.kv_bits,
                                 windows=windows, budget=settings.budget)
        self.seen = 0  # tokens of input consumed so far
        self.document_tokens = self.kept_tokens = 0
        self.pruned_tokens = 0  # lazy prefill: chunk tokens that skipped the layers above the cut, summed
        self.sampler = Sampler(answering, prompt.words)

    @property
    def pinned(self) -> int:
        return self.prompt.pinned

    def read(self, chunks: Iterable[TokenChunk], on_progress: Callable[[Progress], None] | None = None) -> None:
        """Stream the document through the bounded cache. Eviction does not depend on the question, so one read can
        serve many questions (`answer` on forks of this engine)."""
        for chunk in chunks:
            self.prefill_chunk(chunk.ids)
            if on_progress:
                on_progress(Progress(self.seen, chunk.units_done, chunk.first_page, chunk.last_page, self.cache.length()))
        self.document_tokens, self.kept_tokens = self.seen, self.cache.length()

    @torch.no_grad()
    def answer(self, question_ids: list[int], start: float | None = None,
               on_token: Callable[[int], None] | None = None, tally: AttentionTally | None = None,
               numbers: DocumentNumbers | None = None) -> Generation:
        """Prefill the question without eviction and decode; `start` is when reading began (default: now).

        `on_token` hears each answer token as it is chosen; `tally`, if given, adds up the attention the answer pays
        to the document's entries (for citations); `numbers` are the document's, which `numbers_from_document` keeps
        the answer to. The reader, if any, is in force for the question and the answer."""
        start = self.clock() if start is None else start
        self.cache.reserve(len(question_ids) + self.answering.max_new_tokens)
        with ExitStack() as answering:
            answering.enter_context(reading_with(self.model, self.reader))
            if tally is not None:
                answering.enter_context(observe_attention(self.model, tally.observe))
            logits = self.forward(question_ids, score=False)
            self.cache.slide(slack=SLIDE_SLACK)
            first = self.sampler.choose(logits, [], numbers)
            first_token_at = self.clock()
            tokens, steps = self.decode(first, on_token, numbers)
        end = self.clock()
        return Generation(
            token_ids=tokens,
            document_tokens=self.document_tokens,
            question_tokens=len(question_ids),
            cache_kept_tokens=self.kept_tokens,
            cache_peak_tokens=self.cache.peak_tokens,
            cache_peak_bytes=self.cache.peak_bytes,
            time_to_first_token_s=first_token_at - start,
            decode_s=end - first_token_at,
            decode_steps=steps,
        )

    def fork(self, answering: AnswerSettings | None = None) -> Engine:
        """An engine sharing the model and, until either changes them, the cache's tensors: ask it a question and
        this one stays intact. It answers with `answering` (default: this engine's)."""
        clone = copy.copy(self)
        clone.cache = self.cache.fork()
        clone.answering = answering or self.answering
        clone.sampler = Sampler(clone.answering, self.prompt.words)
        return clone

    def with_reader(self, reader: ReaderAdapter | None) -> Engine:
        """A fork of this engine (`fork`) whose answers read with `reader` (None: with none)."""
        clone = self.fork()
        clone.reader = reader
        return clone

    def over_text(self, tokens: int, answering: AnswerSettings) -> Engine:
        """An engine on the same model and prompt that reads `tokens` of text whole, with a full cache, in this one's
        chunks, and answers with `answering` (no reader: the text is read as it is)."""
        settings = ReadSettings(policy=FullPolicy.name, budget=tokens, chunk_size=self.settings.chunk_size,
                                stabilizers=0, positions="original")
        return Engine(self.model, FullPolicy(), settings, self.prompt, answering)

    def restore(self, layers: Sequence[Mapping[str, torch.Tensor]], frequencies: torch.Tensor,
                state: Mapping[str, int]) -> None:
        """Take back a read saved earlier: each layer's cache tensors (on this device, in the model's dtype), the
        rotary frequencies the keys were rotated with, and the counts of `saved_state`. ValueError where the cache
        does not hold the entries the state says."""
        self.cache.dtype = compute_dtype(self.model)
        for layer, tensors in zip(self.cache.layers, layers, strict=True):
            layer.load(tensors)
        self.cache.frequencies = frequencies
        self.seen, self.document_tokens, self.kept_tokens = state["seen"], state["document_tokens"], \
            state["kept_tokens"]
        self.cache.peak_tokens, self.cache.peak_bytes = state["peak_tokens"], state["peak_bytes"]
        if self.cache.length() != self.kept_tokens:
            raise ValueError(f"{self.cache.length()} entries per head, the header says {self.kept_tokens}")

    def saved_state(self) -> dict[str, int]:
        """The counts a saved read keeps beside its cache (`restore`)."""
        return {"seen": self.seen, "document_tokens": self.document_tokens, "kept_tokens": self.kept_tokens,
                "peak_tokens": self.cache.peak_tokens, "peak_bytes": self.cache.peak_bytes}

    @torch.no_grad()
    def prefill_chunk(self, ids: list[int]) -> None:
        """Append one chunk to the cache, scoring it (with the question read after it, for FINCH), then evict down to
        the budget."""
        question = self.read_question_ids
        self.logits(ids + question, self.policy.evicts, None)
        if question:
            self.cache.forget_last(len(question))
            self.seen -= len(question)
        if self.policy.evicts and self.cache.length() > self.settings.budget:
            self.evict()
        else:
            self.cache.slide()

    @torch.no_grad()
    def evict(self) -> None:
        """Keep the top `budget` entries per KV head, pinned and stabilizers first, in the global layers (sliding
        layers keep their window); renumber positions if compact."""
        budget, compact = self.settings.budget, self.settings.positions == "compact"
        renumbered = None
        for layer_idx, layer in enumerate(self.cache.layers):
            if layer.is_sliding:
                continue
            if compact and renumbered is None:
                batch, heads = layer.positions.shape[:2]
                renumbered = torch.arange(budget, device=self.device, dtype=torch.int32).expand(batch, heads, budget)
            ranking = self.policy.ranking(layer_idx, layer.scores)
            keep = select(ranking, budget, self.settings.stabilizers, self.pinned, layer.origins, self.settings.span)
            self.cache.evict(layer_idx, keep, renumbered)
        self.cache.slide(renumber=compact)

    @torch.no_grad()
    def forward(self, ids: list[int], score: bool) -> torch.Tensor:
        """Run `ids` through the model on top of the cache; returns the last position's logits (vocab,)."""
        return self.logits(ids, score, 1)[-1]

    def logits(self, ids: list[int], score: bool, last: int | None) -> torch.Tensor | None:
        """`forward`, returning the last `last` positions' logits (last, vocab), with gradients where the caller
        enables them (training a reader); with `last` None the pass only appends to the cache (a document's chunk:
        the last layer computes its keys and values alone, `core/keys_only.py`) and returns None."""
        token_index = torch.arange(self.seen, self.seen + len(ids), device=self.device)
        if self.settings.positions == "compact":
            start = self.cache.length()
            positions = torch.arange(start, start + len(ids), device=self.device)
        else:
            positions = token_index
        self._sync_frequencies(positions)
        self.cache.stage(positions, token_index)
        with ExitStack() as scoring:
            if self.mask_free:
                scoring.enter_context(use_cache_attention(self.model))
            if score:
                scoring.enter_context(capture_qkv(self.model, self._scorer))
                if self.policy.observes:
                    scoring.enter_context(observe_attention(self.model, self._observe))
                if self.settings.lazy_after:
                    scoring.enter_context(lazy_layers(self.model, self.cache, self.settings.lazy_after,
                                                      lambda: self._flowing(len(ids))))
            if last is None:
                scoring.enter_context(keys_and_values_only(self.model))
            input_ids = torch.tensor([ids], device=self.device)
            if self.step is not None and len(ids) == 1 and not score and last is not None:
                logits = self.step(input_ids, positions.unsqueeze(0), self.cache)
            else:
                logits = self.model(input_ids=input_ids, position_ids=positions.unsqueeze(0), use_cache=True,
                                    **cache_kwargs(self.model, self.cache), logits_to_keep=last or 1).logits
        self.seen += len(ids)
        self.cache.note_peak()
        return None if last is None else logits[0].float()

    def _scorer(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """The capture callback: the policy scores a layer's new entries (their token indices are the origins staged
        for that layer: the whole chunk's, or under lazy prefill the tokens still flowing), for the cache to append."""
        with mark(CAPTURE):
            token_index = self.cache.layers[layer_idx].staged_origins
            self.cache.stage_scores(layer_idx, self.policy.score(layer_idx, q, k, v, token_index))

    def _flowing(self, new: int) -> torch.Tensor | None:
        """Lazy prefill's rule on the last layer below the cut, its `new` chunk entries just scored."""
        layer, s = self.cache.layers[self.settings.lazy_after - 1], self.settings
        flowing = flowing_tokens(layer.scores, layer.origins, new, s.budget, s.stabilizers, self.pinned, s.span,
                                 s.lazy_share, step=max(1, s.chunk_size // LAZY_SHAPES))
        self.pruned_tokens += 0 if flowing is None else new - len(flowing)
        return flowing

    def _observe(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, scaling: float) -> None:
        self.policy.observe(layer_idx, query, key, scaling, self.cache.layers[layer_idx])

    def _sync_frequencies(self, positions: torch.Tensor) -> None:
        """Longrope and dynamic NTK change frequencies with length: bring cached keys along when they do."""
        if self.cache.frequencies is not None and not self.dynamic_frequencies:
            return
        with mark(FREQUENCIES):
            frequencies = frequencies_for(self.rotary, positions)
            if self.cache.sliding and self.cache.window_frequencies is None:
                self.cache.window_frequencies = frequencies_for(self.rotary, positions, SLIDING)
        if self.cache.frequencies is None or self.cache.length() == 0:
            self.cache.frequencies = frequencies
        elif not torch.equal(frequencies, self.cache.frequencies):
            self.cache.switch_frequencies(frequencies)

    def decode(self, first: int, on_token: Callable[[int], None] | None = None,
               numbers: DocumentNumbers | None = None) -> tuple[list[int], int]:
        """Greedy (or sampled) decoding from `first` until a stop token (or a line end, once the answer has begun) or
        max_new_tokens, or, with stop_repeats, until the answer repeats a run of tokens right after itself (the repeat
        is dropped); each token is `choose`n; returns (tokens, steps)."""
        tokens, steps, token = [], 0, first
        while token not in self.prompt.stop_ids and not (tokens and token in self.prompt.line_ends):
            tokens.append(token)
            if on_token:
                on_token(token)
            if len(tokens) >= self.answering.max_new_tokens:
                break
            if self.answering.stop_repeats and (period := repeated_run(tokens, self.answering.stop_repeats)):
                del tokens[-period:]
                break
            token = self.sampler.choose(self.forward([token], score=False), tokens, numbers)
            self.cache.slide(slack=SLIDE_SLACK)
            steps += 1
        return tokens, steps

    def clock(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()
