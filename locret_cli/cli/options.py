"""Options shared by `read`, `ask` and `chat`, and the one way they become a session and a reading."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Annotated, Optional

import typer
from rich.console import Console

from locret_cli.core.settings import LOCATE_MODES, POLICY_NAMES
from locret_cli.errors import LocretError, SettingError

Model = Annotated[Optional[str], typer.Option(help="Hub id, local directory, .gguf file, or smollm2 (SmolLM2-135M-Instruct, with shipped heads). Default: the embedded model.")]
Heads = Annotated[Optional[str], typer.Option(help="Retaining heads: a locret heads dir or an official Locret checkpoint. Default: those shipped for the model, if any.")]
PolicyName = Annotated[Optional[str], typer.Option("--policy", help=f"Eviction policy: {POLICY_NAMES[0]} (default), {', '.join(POLICY_NAMES[1:-1])} or {POLICY_NAMES[-1]}.")]
Budget = Annotated[Optional[int], typer.Option(help="Cache entries kept per KV head. Default 6000, or the model's recorded default.")]
ChunkSize = Annotated[Optional[int], typer.Option(help="Tokens prefilled per step. Default 3072.")]
Stabilizers = Annotated[Optional[int], typer.Option(help="Most recent entries always kept. Default 2500; clipped to budget/2 if it does not fit.")]
Positions = Annotated[Optional[str], typer.Option(help="compact (default): renumber kept entries 0..n-1; original: keep true positions.")]
ScorePool = Annotated[Optional[int], typer.Option(help="locret: each score becomes the best within this many neighbouring tokens (odd). Default 1, or the model's recorded default.")]
Span = Annotated[Optional[int], typer.Option(help="Keep or drop entries in blocks of this many document tokens, each ranked by its best score, so that what is kept reads as text. Default 1 (each entry on its own), or the model's recorded default.")]
KvBits = Annotated[Optional[int], typer.Option(help="Bits per cached key and value: 16 (as the model makes them), 8 or 4 (quantized per entry and head, with its own scale; scores and positions stay exact). Default 16.")]
LazyAfter = Annotated[Optional[int], typer.Option(help="Lazy prefill: a chunk's tokens that the first N layers' eviction would drop skip the layers above them, so reading costs fewer FLOPs. 0: off. Default 0, or the model's recorded default.")]
LazyShare = Annotated[Optional[float], typer.Option(help="Lazy prefill prunes at most this share of a chunk's tokens, the best-scored of the rest still flowing. Default 1.")]
MaxNewTokens = Annotated[Optional[int], typer.Option(help="Longest answer, in tokens. Default 256.")]
StopRepeats = Annotated[Optional[int], typer.Option(help="Stop an answer that repeats a run of this many tokens or more right after itself, dropping the repeat. 0: off. Default 0, or the model's recorded default.")]
Reread = Annotated[Optional[int], typer.Option(help="Answer in two passes: ask the bounded cache, then read again, whole, this many windows of the document where that answer looked, and answer from them. 0: off. Default 0, or the model's recorded default.")]
RereadTokens = Annotated[Optional[int], typer.Option(help="Tokens per re-read window. Default 1024.")]
Strict = Annotated[Optional[bool], typer.Option("--strict/--no-strict", help="Replace an answer whose specific content (numbers, names, codes, phrases) is not in the document with \"The document does not say.\", and exit with status 4. Default off, or the model's recorded default (the embedded model: on).")]
Locate = Annotated[Optional[str], typer.Option(help=f"What names the re-read windows: {', '.join(LOCATE_MODES)} (the first answer's attention, the question's rarer words, or both). Default attention, or the model's recorded default.")]
Temperature = Annotated[float, typer.Option(help="0 decodes greedily.")]
TopP = Annotated[float, typer.Option(help="Nucleus sampling mass when temperature > 0.")]
Seed = Annotated[int, typer.Option(help="Seed for sampling.")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
Dtype = Annotated[str, typer.Option(help="auto (bf16 where fast), bf16, fp16 or fp32.")]
Load4bit = Annotated[bool, typer.Option("--load-4bit", help="Load weights in 4-bit nf4 (bitsandbytes).")]
Load8bit = Annotated[bool, typer.Option("--load-8bit", help="Hold the linear layers' weights in int8, one scale per row: half the bytes of bf16, so faster decoding on the CPU.")]
MaxMemory = Annotated[Optional[str], typer.Option("--max-memory", help="Hold at most this much of the model's weights in memory (such as 2GiB); the rest stays on disk in its safetensors file and is read layer by layer as it runs. CPU only; for a .gguf file, `locret convert` it first.")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code. Off unless asked.")]
Encoding = Annotated[Optional[str], typer.Option(help="Text encoding of the input. Default: UTF-8, or as its BOM says.")]
Force = Annotated[bool, typer.Option("--force", help="Run even when the estimated memory need exceeds what is free.")]
KeptMap = Annotated[Optional[str], typer.Option("--kept-map", help="Also draw the entries kept per page (or line range), cited ones marked, to this PNG.")]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="Print only the answer.")]
ReadFirst = Annotated[bool, typer.Option("--read-first", help="Run the bounded read before answering even when no answer needs it. With --reread and --locate words an answer comes from the windows the question's words name, so by default the read runs only for a question that names none.")]


def read_given(budget, chunk_size, stabilizers, positions, score_pool, span, kv_bits=None, lazy_after=None,
               lazy_share=None) -> dict:
    """The read settings given on the command line (those left out take the model's recorded defaults)."""
    given = dict(budget=budget, chunk_size=chunk_size, stabilizers=stabilizers, positions=positions,
                 score_pool=score_pool, span=span, kv_bits=kv_bits, lazy_after=lazy_after, lazy_share=lazy_share)
    return {k: v for k, v in given.items() if v is not None}


def answer_given(max_new_tokens, temperature, top_p, seed, stop_repeats, reread, reread_tokens, locate,
                 strict=None) -> dict:
    """The answer settings given on the command line."""
    given = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed,
                 stop_repeats=stop_repeats, reread=reread, reread_tokens=reread_tokens, locate=locate, strict=strict)
    return {k: v for k, v in given.items() if v is not None}


def open_reading(source: str, spec, read: dict, answer: dict, err: Console, quiet: bool,
                 encoding: Optional[str] = None, force: bool = False, questions: Sequence[str] = (),
                 defer: bool = False):
    """(session, reading, answer settings): `Session.open` of `source` (a `.locret` file, or a document read with a
    progress bar, for `questions` under a policy that reads with them; with `defer`, tokenized and its bounded read
    left for the first answer that needs it) with the `spec` model. For a saved context, the policy and read
    settings are the file's: giving others is an error; `answer` (max_new_tokens, temperature, top_p, seed) may
    change."""
    from locret_cli.api import load_session
    from locret_cli.api.saved_context import is_saved_context, read_header
    from locret_cli.cli import render
    from locret_cli.cli.report import DocumentProgress
    from locret_cli.inputs.documents import open_document

    def warn(message) -> None:
        err.print(f"[yellow]warning:[/] {render(message)}")

    if source == "-" and sys.stdin.isatty():
        raise LocretError("SOURCE is -, but nothing is piped into stdin")
    saved = is_saved_context(source)
    if saved:
        policy = read_header(source)["policy"]
        if spec.policy and spec.policy != policy:
            raise SettingError("{path} was read with {policy} {saved}, not {given}", path=source, saved=policy,
                               given=spec.policy)
        spec = replace(spec, policy=policy)
    document = None if saved else open_document(source, encoding=encoding)
    spec = replace(spec, policy=spec.policy or "locret")
    with err.status(f"loading {spec.model or 'the embedded model'}", spinner="dots") if not quiet else nullcontext():
        session = load_session(spec, heads_required=not saved)
    if spec.model is None and not quiet:
        warn(f"no --model given: using the {session.loaded.name}")
    answering = session.answer_settings(**answer)
    if saved:
        return session, session.open(source, read), answering
    settings = session.read_settings(warn, **read)
    with DocumentProgress(err, document.unit, document.total_units, enabled=not quiet) as progress:
        reading = session.open(document, settings, on_progress=progress.update, force=force, questions=questions,
                               defer=defer)
    return session, reading, answering


def read_if_needed(reading, question: str, answering, err: Console, quiet: bool, history=()) -> None:
    """Run a Reading's pending bounded read, with a progress bar, when answering `question` needs it."""
    if reading.needs_read(question, answering, history):
        read_pending(reading, err, quiet)


def read_pending(reading, err: Console, quiet: bool) -> None:
    """Run a Reading's pending bounded read, if any, with a progress bar."""
    from locret_cli.cli.report import DocumentProgress

    if reading.pending is None:
        return
    doc = reading.document
    unit, total = ("pages", doc.pages) if doc.kind == "pdf" else ("bytes", doc.size_bytes)
    with DocumentProgress(err, unit, total, enabled=not quiet) as progress:
        reading.read_now(progress.update)
