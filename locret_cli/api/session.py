"""A loaded model and its heads (`Session`), and `load_session`, which builds one from a `ModelSpec`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO

import torch

from locret_cli.api.answer import AskResult, DocumentInfo
from locret_cli.api.engines import build_engine
from locret_cli.api.pending_read import PendingRead, sized
from locret_cli.api.plan import NEEDS_HEADS, GivenSettings, ModelFacts, Plan, resolve
from locret_cli.api.question_room import check_positions, question_tokens, trained_positions
from locret_cli.api.reading import SOURCES_SHOWN, Reading
from locret_cli.core.answer.compiled_step import compile_decode, cpp_compiler
from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.core.attention.rope import changes_with_length
from locret_cli.core.engine import Engine, Progress
from locret_cli.core.families import PLAIN_LLAMA, spoken
from locret_cli.core.heads import RetainingHeads, compute_dtype
from locret_cli.core.measure import check_fits, plan_memory, reset_peak
from locret_cli.core.policies import Policy, make_policy
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import rotary_module
from locret_cli.errors import SettingError
from locret_cli.files import is_saved_context
from locret_cli.inputs.documents import Document, open_document, token_chunks
from locret_cli.inputs.prompt import PromptTokens, conversation_ids, prompt_layout
from locret_cli.inputs.sources import SourceMap, TokenChunk
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import LoadedModel, load_model
from locret_cli.models.reader_files import load_reader
from locret_cli.models.shipped import find_shipped
from locret_cli.models.spec import ModelSpec
from locret_cli.runtime import native_attention, native_one_query
from locret_cli.runtime.native_rows import take_rows
from locret_cli.runtime.packed_linear import pack_if_room
from locret_cli.settings import DEFAULT_POLICY, AnswerSettings, policy_knobs
from locret_cli.units import human_bytes


@dataclass
class Session:
    """A loaded model, its tokenizer, its retaining heads (the locret policy needs them), and the reader its answers
    from the bounded cache read with, if any (`core/answer/reader.py`).

    The front door: `plan` a run, then `open` a source (a document read once, or a saved `.locret` context loaded),
    or `read` a document, and ask the Reading; `ask` is one question about one document."""

    loaded: LoadedModel
    heads: RetainingHeads | None
    reader: ReaderAdapter | None = None

    @functools.cached_property
    def prompt(self) -> PromptTokens:
        """The prompt's tokens for this model and tokenizer (`prompt.PromptTokens`); found once per session."""
        return PromptTokens.of(self.loaded.model, self.loaded.tokenizer)

    @property
    def facts(self) -> ModelFacts:
        """What a plan needs to know of this model (`plan.ModelFacts`)."""
        config = self.loaded.model.config
        return ModelFacts(self.loaded.defaults, config.get_text_config(decoder=True).num_hidden_layers,
                          any(layer_windows(config)), self.prompt, self.heads is not None)

    def plan(self, read: GivenSettings = None, answer: GivenSettings = None, *,
             source: str | Document | None = None, questions: Sequence[str] | None = None, defer: bool = False,
             history_tokens: int | None = None) -> Plan:
        """This session's plan of a run (`plan.resolve`): settings given (whole, or by name; None values ignored)
        over the model's recorded defaults over the global ones; a saved context's read settings at `source`;
        `questions` None where they are not known yet (settings only)."""
        saved = None
        if isinstance(source, str) and is_saved_context(source):
            from locret_cli.api.context_header import read_header

            saved = (source, read_header(source))
        plan = resolve(self.facts, read, answer, history_tokens=history_tokens, questions=questions, defer=defer,
                       saved=saved)
        if not questions:
            return plan
        tokens = [question_tokens(self.loaded.tokenizer, question) for question in questions]
        for question, length in zip(questions, tokens):
            check_positions(self.loaded.model, plan.answer, length, question)
        return replace(plan, question_tokens=max(tokens))

    def open(self, source: str | Document, settings: GivenSettings | Plan = None, **read_options) -> Reading:
        """A Reading of `source`: the `.locret` file saved there, loaded, or the document there (a path, or `-` for
        stdin), read. `settings` are a plan, whole ReadSettings, or only those given; a saved context keeps the
        settings it was read with, and refuses others. `read_options` go to `read`."""
        if isinstance(source, Document) or not is_saved_context(source):
            return self.read(source, settings, **read_options)
        from locret_cli.api.saved_context import load_reading

        plan = settings if isinstance(settings, Plan) else self.plan(read=settings, source=source)
        reading = load_reading(source, self, plan)
        reading.compute, reading.question_forms = self.ready_to_compute(), self.loaded.question_forms
        return reading

    def read(
        self,
        source: str | Document,
        settings: GivenSettings | Plan = None,
        on_progress: Callable[[Progress], None] | None = None,
        encoding: str | None = None,
        stdin: BinaryIO | None = None,
        force: bool = False,
        policy: Policy | None = None,
        questions: Sequence[str] = (),
        defer: bool = False,
    ) -> Reading:
        """Read `source` (an opened Document, a path, or `-` for stdin) once into a bounded cache; ask the Reading
        as many questions as you like. `settings` are a plan (`plan`), which then decides `questions` and `defer`
        too, or the read settings to plan with (whole, or those given). Refuses (LocretError) a run estimated not to
        fit in free memory, unless `force`. `policy` replaces the plan's (an evaluation's oracle, say).

        `questions` steer the read only under a policy that reads with them (finch, or locret with `question_share`
        above 0): they are read together after every chunk, and the Reading records them (`read_for`). Other
        policies ignore them, so the read stays question-agnostic.

        `defer` tokenizes the document and leaves the bounded read for the first answer that needs the cache
        (`Reading.read_now`): answers located by the question's words come from re-read windows alone. A read
        for questions under finch is never deferred; a locret read guided by them (`question_share`) may be."""
        plan = settings if isinstance(settings, Plan) else self.plan(read=settings, questions=questions, defer=defer)
        document = source if isinstance(source, Document) else open_document(source, encoding=encoding, stdin=stdin)
        question_ids = self.read_for_ids(plan)
        policy = policy or make_policy(plan.read.policy, self.loaded.model, self.heads, **policy_knobs(plan.read),
                                       question_length=len(question_ids))
        if not force:
            self.check_memory(plan, document)
        compute = self.ready_to_compute()
        engine = build_engine(self.loaded.model, plan, policy, self.reader, question_ids)
        return self.reading_of(engine, document, plan, compute, sized(on_progress, document.unit,
                                                                      document.total_units))

    def read_for_ids(self, plan: Plan) -> list[int]:
        """The questions the plan's read is steered by, in their chat layout (none for most policies)."""
        return conversation_ids(self.loaded.tokenizer, (), "\n".join(plan.read_for)) if plan.read_for else []

    def reading_of(self, engine: Engine, document: Document, plan: Plan, compute: str,
                   on_progress: Callable[[Progress], None] | None) -> Reading:
        """`document` tokenized and read through `engine` (or, for a deferred plan, tokenized and its read left
        pending), as a Reading."""
        tokenizer, prefix = self.loaded.tokenizer, prompt_layout(self.loaded.tokenizer).head_ids
        source_map = SourceMap("page" if document.kind == "pdf" else "lines")
        reset_peak(self.loaded.model.device)
        started = engine.clock()
        read_ids: list[torch.Tensor] = []
        chunks = kept_ids(token_chunks(document, tokenizer, plan.read.chunk_size, prefix, source_map), read_ids)
        pending = None
        if plan.defer:
            pending = PendingRead.tokenize(chunks, on_progress)
        else:
            engine.read(chunks, on_progress)
        read_s = engine.clock() - started
        input_ids = torch.cat(read_ids) if read_ids else torch.zeros(0, dtype=torch.int32)
        warnings = [*plan.warnings, *past_positions(self.loaded.model, plan, len(input_ids)), *document.warnings]
        info = DocumentInfo(document.name, document.kind, len(input_ids) - len(prefix), document.pages,
                            document.sha256, document.size_bytes, read_s)
        return Reading(engine, tokenizer, self.loaded.name, prefix, source_map, info, read_s, warnings=warnings,
                       compute=compute, question_forms=self.loaded.question_forms, input_ids=input_ids, read_for=plan.read_for,
                       pending=pending)

    def ask(self, source: str | Document, question: str, settings: GivenSettings | Plan = None,
            answering: AnswerSettings | None = None, sources: int = SOURCES_SHOWN, **read_options) -> AskResult:
        """Read `source` (for `question`, under a policy that reads with it) and answer `question` from it:
        `read(..., questions=[question], defer=True).ask(question)`: the bounded read runs only if the answer needs
        it."""
        reading = self.read(source, settings, questions=[question], **{"defer": True, **read_options})
        return reading.ask(question, answering, sources=sources, on_read=read_options.get("on_progress"))

    def ready_to_compute(self) -> str:
        """Make the model ready to read: on the CPU, its bf16 linears' one-row products by locret's kernel on the
        weights in place (`native_rows.py`), else packed for oneDNN where that fits (`packed_linear.py`); and on the
        CPU chunks' attention in bf16 (`native_attention.py`) and decode steps' attention in fp32
        (`native_one_query.py`) by locret's kernels where they ran faster. Returns how it computes, for the cost table
        ("bf16: ...; one-row products by locret's kernel")."""
        model = self.loaded.model
        in_place = take_rows(model)
        packed = pack_if_room(model)
        parts = [self.loaded.dtype_reason or str(compute_dtype(model)).removeprefix("torch.")]
        parts += ["one-row products by locret's kernel, weights in place"] if in_place else []
        parts += [f"linear weights packed for oneDNN (+{human_bytes(packed)})"] if packed else []
        if model.device.type == "cpu" and compute_dtype(model) == torch.bfloat16:
            parts += [line for line in [native_attention.install()] if line]
        elif model.device.type == "cpu" and compute_dtype(model) == torch.float32:
            parts += [line for line in [native_one_query.install()] if line]
        return "; ".join(parts)

    def check_memory(self, plan: Plan, document: Document) -> None:
        """Refuse a run estimated not to fit in free memory, naming the setting to lower: the cache's entries as the
        plan counts them (`Plan.cache_entries`), and the longest of a chunk and the question, prefilled in one pass.
        A full cache grows with the document, so it is estimated only for text files of known size (about 4 bytes
        per token)."""
        known = document.kind == "text" and document.total_units
        entries = plan.cache_entries(document.total_units // 4 if known else None)
        if entries is None:
            return
        settings = plan.read
        hidden = self.heads.hidden if settings.policy == "locret" and self.heads is not None else 0
        keys_move = (plan.evicts and settings.positions == "compact") or changes_with_length(
            rotary_module(self.loaded.model))
        memory = plan_memory(self.loaded.model, entries, max(settings.chunk_size, plan.question_room), hidden,
                             keys_move, settings.kv_bits)
        check_fits(memory, "budget" if plan.evicts else None)


def past_positions(model, plan: Plan, tokens: int) -> list[str]:
    """A warning where the read numbers tokens past the positions the model was trained on: a cache that keeps
    every entry, or original positions. Compact positions of an evicting policy stay within budget and chunk."""
    trained = trained_positions(model)
    if trained is None or tokens <= trained or (plan.evicts and plan.read.positions == "compact"):
        return []
    return [f"the document's {tokens:,} tokens pass the {trained:,} positions this model was trained on: answers "
            f"from past them are unreliable; an evicting policy with compact positions stays within them"]


def kept_ids(chunks: Iterable[TokenChunk], into: list[torch.Tensor]) -> Iterator[TokenChunk]:
    """`chunks`, passed on, each one's ids also appended to `into` as an int32 tensor (a 128K-token book: 512 KiB)."""
    for chunk in chunks:
        into.append(torch.tensor(chunk.ids, dtype=torch.int32))
        yield chunk


def load_session(model: str | ModelSpec | None = None, *, reads_with: str | None = DEFAULT_POLICY,
                 **options) -> Session:
    """Load a model and its heads: a ModelSpec, or its fields as arguments (`model` None: the embedded model;
    `options` are ModelSpec's other fields, such as heads, device, dtype, reader). Heads come from `heads`, else those
    shipped for this model (`models/shipped.py`), whose recorded engine settings then become the defaults (for every
    policy). The reader comes from `reader` (a directory, or "off"), else the one shipped for the model, if any.
    `reads_with` is the policy the reads will use, where known: the locret policy's missing heads are then refused
    before the weights load (None: a session that only answers from saved contexts, which needs no heads). With
    `compile_decode`, answers decode with a step compiled whole (`core/answer/compiled_step.py`)."""
    spec = model if isinstance(model, ModelSpec) else ModelSpec(model, **options)
    session = _loaded_session(spec.checked(), reads_with == "locret")
    if spec.compile_decode:
        compiled_decoding(session.loaded.model)
    return session


def compiled_decoding(model) -> None:
    """Give `model` the compiled decode step, or refuse in one line where it cannot have one."""
    if cpp_compiler() is None:
        raise SettingError("{compile_decode} needs a C++ compiler (install g++)")
    if not compile_decode(model):
        raise SettingError(f"{{compile_decode}} compiles {spoken(PLAIN_LLAMA)} decoders on the CPU; this model is "
                           f"{model.config.model_type} on {model.device.type}")


def _loaded_session(spec: ModelSpec, heads_required: bool) -> Session:
    """`load_session` of a spec, before any compiling; `heads_required`: the reads use the locret policy."""
    if spec.arch is not None:
        from locret_cli.models.arch import random_session_parts

        loaded, heads = random_session_parts(spec.arch, spec.device, spec.dtype, spec.load_8bit, spec.load_int4)
        return Session(loaded, heads, chosen_reader(spec.reader, None, loaded.model))
    if spec.model is None:
        from locret_cli.models.embedded import load_embedded

        loaded, embedded_heads = load_embedded(spec.device, spec.dtype)
        return Session(loaded, load_heads(spec.heads, loaded.model) if spec.heads else embedded_heads,
                       chosen_reader(spec.reader, None, loaded.model))
    _preflight(spec, heads_required)
    loaded = load_model(spec.model, spec.device, spec.dtype, spec.load_4bit, spec.trust_remote_code,
                        load_8bit=spec.load_8bit, max_memory=spec.max_memory, load_int4=spec.load_int4)
    shipped = None if spec.heads else find_shipped(loaded.model)
    if shipped is not None:
        loaded.defaults = shipped.defaults
    chosen = load_heads(spec.heads or shipped.directory, loaded.model) if spec.heads or shipped else None
    if chosen is None and heads_required:
        raise SettingError(NEEDS_HEADS)
    return Session(loaded, chosen, chosen_reader(spec.reader, shipped, loaded.model))


def _preflight(spec: ModelSpec, heads_required: bool) -> None:
    """Refusals that the model's files decide without its weights (`models/preflight.py`)."""
    from locret_cli.models import named, preflight

    source = named.resolve(spec.model)
    if spec.heads:
        preflight.check_heads_shape(spec.heads, source)
    elif heads_required:
        preflight.require_shipped_heads(source)


def chosen_reader(given: str | None, shipped, model) -> ReaderAdapter | None:
    """The reader `given` names (a directory; "off": none), else the one `shipped` with the model's heads."""
    if given == "off":
        return None
    if given is not None:
        return load_reader(given, model)
    if shipped is not None and shipped.reader is not None:
        return load_reader(shipped.reader, model, source=f"shipped for {shipped.reader.name}")
    return None

