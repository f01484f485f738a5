"""A loaded model and its heads (`Session`), and `load_session`, which builds one from a `ModelSpec`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO

import torch

from locret_cli.api.answer import AskResult, DocumentInfo
from locret_cli.api.pending_read import PendingRead, sized
from locret_cli.api.plan import Given, ModelFacts, Plan, resolve
from locret_cli.api.question_room import check_positions, question_tokens, trained_positions
from locret_cli.api.reading import SOURCES_SHOWN, Reading
from locret_cli.core.answer.compiled_step import compile_decode, cpp_compiler
from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.core.attention.rope import changes_with_length
from locret_cli.core.engine import QUESTION_ALLOWANCE, Engine, Progress
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.measure import check_fits, plan_memory, reset_peak
from locret_cli.core.policies import Policy, make_policy
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import rotary_module
from locret_cli.errors import SettingError
from locret_cli.files import is_saved_context
from locret_cli.inputs.documents import Document, open_document, token_chunks
from locret_cli.inputs.prompt import conversation_ids, line_end_ids, prompt_layout, stop_token_ids, word_ids
from locret_cli.inputs.sources import SourceMap, TokenChunk
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import LoadedModel, load_model
from locret_cli.models.reader_files import load_reader
from locret_cli.models.shipped import find_shipped
from locret_cli.models.spec import ModelSpec
from locret_cli.runtime import native_attention
from locret_cli.runtime.packed_linear import pack_if_room
from locret_cli.settings import AnswerSettings, ReadSettings, policy_knobs
from locret_cli.units import human_bytes


@dataclass
class Session:
    """A loaded model, its tokenizer, (for the locret policy) its heads, and the reader its answers from the bounded
    cache read with, if any (`core/answer/reader.py`)."""

    loaded: LoadedModel
    heads: RetainingHeads | None
    policy: str
    reader: ReaderAdapter | None = None

    @functools.cached_property
    def line_ends(self) -> frozenset[int]:
        """Where a base model's answer ends (`prompt.line_end_ids`); found once per session."""
        return line_end_ids(self.loaded.tokenizer)

    @property
    def facts(self) -> ModelFacts:
        """What a plan needs to know of this model (`plan.ModelFacts`)."""
        config = self.loaded.model.config
        return ModelFacts(self.loaded.defaults, config.get_text_config(decoder=True).num_hidden_layers,
                          any(layer_windows(config)), len(self._prefix))

    @functools.cached_property
    def _prefix(self) -> list[int]:
        return prompt_layout(self.loaded.tokenizer).head_ids

    def plan(self, read: Given = None, answer: Given = None, *, source: str | Document | None = None,
             questions: Sequence[str] | None = None, defer: bool = False,
             history_tokens: int | None = None) -> Plan:
        """This session's plan of a run (`plan.resolve`): settings given (whole, or by name; None values ignored)
        over the model's recorded defaults over the global ones; a saved context's read settings at `source`;
        `questions` None where they are not known yet (settings only)."""
        saved = None
        if isinstance(source, str) and is_saved_context(source):
            from locret_cli.api.saved_context import read_header

            saved = (source, read_header(source))
        plan = resolve(self.policy, self.facts, read, answer, history_tokens=history_tokens, questions=questions,
                       defer=defer, saved=saved)
        if not questions:
            return plan
        tokens = [question_tokens(self.loaded.tokenizer, question) for question in questions]
        for question, length in zip(questions, tokens):
            check_positions(self.loaded.model, plan.answer, length, question)
        return replace(plan, question_tokens=max(tokens))

    def read_settings(self, warn: Callable[[str | SettingError], None] = lambda _: None, **given) -> ReadSettings:
        """The read settings of this session's plan with `given` ones; `warn` hears what the plan warns of."""
        plan = self.plan(read=given)
        for warning in plan.warnings:
            warn(warning)
        return plan.read

    def answer_settings(self, **given) -> AnswerSettings:
        """The answer settings of this session's plan with `given` ones."""
        return self.plan(answer=given).answer

    def open(self, source: str | Document, settings: Given | Plan = None, **read_options) -> Reading:
        """A Reading of `source`: the `.locret` file saved there, loaded, or the document there (a path, or `-` for
        stdin), read. `settings` are a plan, whole ReadSettings, or only those given; a saved context keeps the
        settings it was read with, and refuses others. `read_options` go to `read`."""
        if isinstance(source, Document) or not is_saved_context(source):
            return self.read(source, settings, **read_options)
        return self.load(source, settings if isinstance(settings, Plan) else self.plan(read=settings, source=source))

    def read(
        self,
        source: str | Document,
        settings: Given | Plan = None,
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
        fit in free memory, unless `force`. `policy` replaces the session's own (an evaluation's oracle, say).

        `questions` steer the read only under a policy that reads with them (finch): they are read together after
        every chunk, and the Reading records them (`read_for`). Other policies ignore them, so the read stays
        question-agnostic.

        `defer` tokenizes the document and leaves the bounded read for the first answer that needs the cache
        (`Reading.read_now`): answers located by the question's words come from re-read windows alone. A read
        for questions (finch) is never deferred."""
        plan = settings if isinstance(settings, Plan) else self.plan(read=settings, questions=questions, defer=defer)
        settings, answering, read_for = plan.read, plan.answer, plan.read_for
        document = source if isinstance(source, Document) else open_document(source, encoding=encoding, stdin=stdin)
        model, tokenizer, prefix = self.loaded.model, self.loaded.tokenizer, self._prefix
        question_ids = conversation_ids(tokenizer, (), "\n".join(read_for)) if read_for else None
        policy = policy or make_policy(self.policy, model, self.heads, **policy_knobs(settings),
                                       question_length=len(question_ids or ()))
        if not force:
            question = max(QUESTION_ALLOWANCE, plan.question_tokens)
            self.check_memory(policy, settings, document, question + answering.max_new_tokens, question)
        compute = self.ready_to_compute()
        engine = Engine(model, policy, settings, stop_token_ids(model, tokenizer), len(prefix), answering,
                        question_ids, self.line_ends, word_ids(tokenizer))
        engine.reader = self.reader
        source_map = SourceMap("page" if document.kind == "pdf" else "lines")
        reset_peak(model.device)
        started = engine.clock()
        read_ids: list[torch.Tensor] = []
        chunks = kept_ids(token_chunks(document, tokenizer, settings.chunk_size, prefix, source_map), read_ids)
        pending, on_progress = None, sized(on_progress, document.unit, document.total_units)
        if plan.defer:
            pending = PendingRead.tokenize(chunks, on_progress)
        else:
            engine.read(chunks, on_progress)
        read_s = engine.clock() - started
        input_ids = torch.cat(read_ids) if read_ids else torch.zeros(0, dtype=torch.int32)
        warnings = [*plan.warnings, *past_positions(model, policy, settings, len(input_ids))]
        info = DocumentInfo(document.name, document.kind, len(input_ids) - len(prefix), document.pages,
                            document.sha256, document.size_bytes, read_s)
        return Reading(engine, tokenizer, self.loaded.name, prefix, source_map, info, read_s,
                       warnings=warnings + document.warnings, compute=compute, forms=self.loaded.forms,
                       input_ids=input_ids, read_for=read_for, pending=pending)

    def ask(self, source: str | Document, question: str, settings: ReadSettings | None = None,
            answering: AnswerSettings | None = None, sources: int = SOURCES_SHOWN, **read_options) -> AskResult:
        """Read `source` (for `question`, under a policy that reads with it) and answer `question` from it:
        `read(..., questions=[question], defer=True).ask(question)`: the bounded read runs only if the answer needs
        it."""
        reading = self.read(source, settings, questions=[question], **{"defer": True, **read_options})
        return reading.ask(question, answering, sources=sources, on_read=read_options.get("on_progress"))

    def load(self, path: str, plan: Plan | None = None) -> Reading:
        """The Reading saved at `path` by `save_reading` (`locret read -o`), without the document, answering with
        `plan`'s answer settings (default: this session's)."""
        from locret_cli.api.saved_context import load_reading

        plan = plan or self.plan(source=path)
        reading = load_reading(path, self.loaded.model, self.loaded.tokenizer, self.loaded.name, self.heads,
                               plan.answer)
        reading.compute = self.ready_to_compute()
        reading.forms = self.loaded.forms
        reading.engine.reader = self.reader
        return reading

    def ready_to_compute(self) -> str:
        """Make the model ready to read: its bf16 linears packed for oneDNN where that pays and fits
        (`packed_linear.py`), and on the CPU in bf16 chunks' attention by locret's kernel where it ran faster
        (`native_attention.py`). Returns how it computes, for the cost table ("bf16: ...; linear weights packed")."""
        model = self.loaded.model
        packed = pack_if_room(model)
        parts = [self.loaded.dtype_reason or str(model.dtype).removeprefix("torch.")]
        parts += [f"linear weights packed for oneDNN (+{human_bytes(packed)})"] if packed else []
        if model.device.type == "cpu" and model.dtype == torch.bfloat16:
            parts += [line for line in [native_attention.install()] if line]
        return "; ".join(parts)

    def check_memory(self, policy: Policy, settings: ReadSettings, document: Document, after: int,
                     question: int = QUESTION_ALLOWANCE) -> None:
        """Refuse a run estimated not to fit in free memory, naming the setting to lower; `after` is the tokens
        that follow the document (question and answer), `question` the longest question's, prefilled in one pass
        (its activations are planned for where it is longer than a chunk). A full cache grows with the document,
        so it is estimated only for text files of known size (about 4 bytes per token)."""
        if policy.evicts:
            entries = settings.budget + settings.chunk_size + after
        elif document.kind == "text" and document.total_units:
            entries = document.total_units // 4 + after
        else:
            return
        hidden = self.heads.hidden if policy.name == "locret" and self.heads is not None else 0
        keys_move = (policy.evicts and settings.positions == "compact") or changes_with_length(
            rotary_module(self.loaded.model))
        plan = plan_memory(self.loaded.model, entries, max(settings.chunk_size, question), hidden, keys_move,
                           settings.kv_bits)
        check_fits(plan, "budget" if policy.evicts else None)


def past_positions(model, policy: Policy, settings: ReadSettings, tokens: int) -> list[str]:
    """A warning where the read numbers tokens past the positions the model was trained on: a cache that keeps
    every entry, or original positions. Compact positions of an evicting policy stay within budget and chunk."""
    trained = trained_positions(model)
    if trained is None or tokens <= trained or (policy.evicts and settings.positions == "compact"):
        return []
    return [f"the document's {tokens:,} tokens pass the {trained:,} positions this model was trained on: answers "
            f"from past them are unreliable; an evicting policy with compact positions stays within them"]


def kept_ids(chunks: Iterable[TokenChunk], into: list[torch.Tensor]) -> Iterator[TokenChunk]:
    """`chunks`, passed on, each one's ids also appended to `into` as an int32 tensor (a 128K-token book: 512 KiB)."""
    for chunk in chunks:
        into.append(torch.tensor(chunk.ids, dtype=torch.int32))
        yield chunk


def load_session(model: str | ModelSpec | None = None, *, heads_required: bool = True, **options) -> Session:
    """Load a model and the heads the policy needs: a ModelSpec, or its fields as arguments (`model` None: the
    embedded model; `options` are ModelSpec's other fields, such as heads, policy, device, dtype, reader). Heads come
    from `heads`, else those shipped for this model (`models/shipped.py`), whose recorded engine settings then become
    the defaults (for every policy). The reader comes from `reader` (a directory, or "off"), else the one shipped for
    the model, if any. A session that only answers from saved contexts needs no heads: pass heads_required=False.
    With `compile_decode`, answers decode with a step compiled whole (`core/answer/compiled_step.py`)."""
    spec = model if isinstance(model, ModelSpec) else ModelSpec(model, **options)
    session = _loaded_session(spec.checked(), heads_required)
    if spec.compile_decode:
        compiled_decoding(session.loaded.model)
    return session


def compiled_decoding(model) -> None:
    """Give `model` the compiled decode step, or refuse in one line where it cannot have one."""
    if cpp_compiler() is None:
        raise SettingError("{compile_decode} needs a C++ compiler (install g++)")
    if not compile_decode(model):
        raise SettingError(f"{{compile_decode}} compiles Llama, Mistral and Qwen2 decoders on the CPU; this model is "
                           f"{model.config.model_type} on {model.device.type}")


def _loaded_session(spec: ModelSpec, heads_required: bool) -> Session:
    """`load_session` of a spec, before any compiling."""
    if spec.arch is not None:
        from locret_cli.models.arch import random_session_parts

        loaded, heads = random_session_parts(spec.arch, spec.device, spec.dtype, spec.load_8bit)
        return Session(loaded, heads, spec.policy, chosen_reader(spec.reader, None, loaded.model))
    if spec.model is None:
        from locret_cli.models.embedded import load_embedded

        loaded, embedded_heads = load_embedded(spec.device, spec.dtype)
        return Session(loaded, load_heads(spec.heads, loaded.model) if spec.heads else embedded_heads, spec.policy,
                       chosen_reader(spec.reader, None, loaded.model))
    _preflight(spec, heads_required)
    loaded = load_model(spec.model, spec.device, spec.dtype, spec.load_4bit, spec.trust_remote_code,
                        load_8bit=spec.load_8bit, max_memory=spec.max_memory)
    shipped = None if spec.heads else find_shipped(loaded.model)
    if shipped is not None:
        loaded.defaults = shipped.defaults
    chosen = load_heads(spec.heads or shipped.directory, loaded.model) if spec.heads or shipped else None
    if spec.policy == "locret" and chosen is None and heads_required:
        raise SettingError("the locret policy needs retaining heads for this model: pass {heads} DIR (train them "
                           "with `locret train`), or choose {policy} streaming or full")
    return Session(loaded, chosen, spec.policy, chosen_reader(spec.reader, shipped, loaded.model))


def _preflight(spec: ModelSpec, heads_required: bool) -> None:
    """Refusals that the model's files decide without its weights (`models/preflight.py`)."""
    from locret_cli.models import named, preflight

    source = named.resolve(spec.model)
    if spec.heads:
        preflight.check_heads_shape(spec.heads, source)
    elif spec.policy == "locret" and heads_required:
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

