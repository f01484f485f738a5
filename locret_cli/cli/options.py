"""Options shared by `read`, `ask` and `chat`, and the one way they become a session and a reading."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Optional

import typer
from rich.console import Console

from locret_cli.errors import LocretError

Model = Annotated[Optional[str], typer.Option(help="Hub id, local directory, .gguf file, or smollm2 (SmolLM2-135M-Instruct, with shipped heads). Default: the embedded model.")]
Heads = Annotated[Optional[str], typer.Option(help="Retaining heads: a locret heads dir or an official Locret checkpoint. Default: those shipped for the model, if any.")]
PolicyName = Annotated[Optional[str], typer.Option("--policy", help="Eviction policy: locret (default), streaming, h2o, snapkv, random, knorm or full.")]
Budget = Annotated[Optional[int], typer.Option(help="Cache entries kept per KV head. Default 6000, or the model's recorded default.")]
ChunkSize = Annotated[Optional[int], typer.Option(help="Tokens prefilled per step. Default 3072.")]
Stabilizers = Annotated[Optional[int], typer.Option(help="Most recent entries always kept. Default 2500; clipped to budget/2 if it does not fit.")]
Positions = Annotated[Optional[str], typer.Option(help="compact (default): renumber kept entries 0..n-1; original: keep true positions.")]
ScorePool = Annotated[Optional[int], typer.Option(help="locret: each score becomes the best within this many neighbouring tokens (odd). Default 1, or the model's recorded default.")]
MaxNewTokens = Annotated[Optional[int], typer.Option(help="Longest answer, in tokens. Default 256.")]
Temperature = Annotated[float, typer.Option(help="0 decodes greedily.")]
TopP = Annotated[float, typer.Option(help="Nucleus sampling mass when temperature > 0.")]
Seed = Annotated[int, typer.Option(help="Seed for sampling.")]
Device = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
Dtype = Annotated[str, typer.Option(help="auto (bf16 where fast), bf16, fp16 or fp32.")]
Load4bit = Annotated[bool, typer.Option("--load-4bit", help="Load weights in 4-bit nf4 (bitsandbytes).")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code. Off unless asked.")]
Encoding = Annotated[Optional[str], typer.Option(help="Text encoding of the input. Default: UTF-8, or as its BOM says.")]
Force = Annotated[bool, typer.Option("--force", help="Run even when the estimated memory need exceeds what is free.")]
KeptMap = Annotated[Optional[str], typer.Option("--kept-map", help="Also draw the entries kept per page (or line range), cited ones marked, to this PNG.")]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="Print only the answer.")]


@dataclass
class ModelChoice:
    """How to load the model, its heads and policy."""

    model: Optional[str]
    heads: Optional[str]
    policy: Optional[str]
    device: str
    dtype: str
    load_4bit: bool
    trust_remote_code: bool


@dataclass
class ReadChoice:
    """The settings that shape a reading, as given (None: not given)."""

    budget: Optional[int]
    chunk_size: Optional[int]
    stabilizers: Optional[int]
    positions: Optional[str]
    score_pool: Optional[int]

    def given(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}


def open_reading(source: str, choice: ModelChoice, read: ReadChoice, answer: dict, err: Console, quiet: bool,
                 encoding: Optional[str] = None, force: bool = False):
    """(session, reading, settings to answer with): a `.locret` file loaded, or the document at `source` read with
    a progress bar. For a saved context, the policy and reading settings are the file's: giving others is an
    error; `answer` (max_new_tokens, temperature, top_p, seed) may change."""
    from locret_cli.api import load_session
    from locret_cli.documents import open_document
    from locret_cli.report import DocumentProgress
    from locret_cli.saved_context import is_saved_context, read_header

    def warn(message: str) -> None:
        err.print(f"[yellow]warning:[/] {message}")

    if source == "-" and sys.stdin.isatty():
        raise LocretError("SOURCE is -, but nothing is piped into stdin")
    saved = is_saved_context(source)
    header = read_header(source) if saved else None
    policy = choice.policy or "locret"
    if header and choice.policy and choice.policy != header["policy"]:
        raise LocretError(f"{source} was read with --policy {header['policy']}, not {choice.policy}")
    document = None if saved else open_document(source, encoding=encoding)
    with err.status(f"loading {choice.model or 'the embedded model'}", spinner="dots") if not quiet else nullcontext():
        session = load_session(choice.model, choice.heads, header["policy"] if header else policy, choice.device,
                               choice.dtype, choice.load_4bit, choice.trust_remote_code, heads_required=not saved)
    if choice.model is None and not quiet:
        warn(f"no --model given: using the {session.loaded.name}")
    if saved:
        reading = session.load(source)
        reading.answer_settings(replace(reading.settings, **read.given()))  # refuses other reading settings
        return session, reading, session.settings(warn, **{**asdict(reading.settings), **answer})
    settings = session.settings(warn, **read.given(), **answer)
    with DocumentProgress(err, document.unit, document.total_units, enabled=not quiet) as progress:
        reading = session.read(document, settings, on_progress=progress.update, force=force)
    return session, reading, reading.settings
