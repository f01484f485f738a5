"""Option groups shared by `read`, `ask`, `chat` and `batch`, each option declared once.

The reading and answering options are made from the settings' own declarations (`settings.py`: name, type,
default, help, bounds); the model options are declared here. `@option_groups(MODEL, READING, ANSWERING)` adds a
group's options to a command, each in its help panel, and hands the command what they add up to: `spec` (a
ModelSpec), `read` and `answer` (the settings given, by name; those left out take the model's recorded defaults).

    @app.command()
    @domain_errors
    @option_groups(MODEL, READING)
    def read(source: ..., *, spec: ModelSpec, read: dict) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass, fields
from typing import Annotated, Callable, Optional

import typer

from locret_cli.models.spec import ModelSpec
from locret_cli.settings import DEFAULT_POLICY, POLICY_NAMES, AnswerSettings, ReadSettings, shown_value

MODEL_PANEL, READING_PANEL, ANSWERING_PANEL = "Model", "Reading (fixed once the document is read)", "Answering"
OUTPUT_PANEL = "Input and output"


ModelName = Annotated[Optional[str], typer.Option(
    "--model", help="Hub id, local directory, .gguf file, smollm2 (SmolLM2-135M-Instruct) or gemma3-270m (Gemma 3 270M base), with shipped heads. "
                    "Default: the embedded model.", rich_help_panel=MODEL_PANEL)]
Heads = Annotated[Optional[str], typer.Option(
    "--heads", help="Retaining heads: a locret heads dir or an official Locret checkpoint. Default: those shipped for "
                    "the model, if any.", rich_help_panel=MODEL_PANEL)]
Reader = Annotated[Optional[str], typer.Option(
    "--reader", help="The reader that answers from the bounded cache: a reader dir (`locret train-reader`), or off. "
                     "Default: the one shipped for the model, if any.", rich_help_panel=MODEL_PANEL)]
Device = Annotated[str, typer.Option("--device", help="auto, cpu or cuda.", rich_help_panel=MODEL_PANEL)]
Dtype = Annotated[str, typer.Option("--dtype", help="auto (bf16 where fast), bf16, fp16 or fp32.",
                                    rich_help_panel=MODEL_PANEL)]
Load4bit = Annotated[bool, typer.Option("--load-4bit", help="Load weights in 4-bit nf4 (bitsandbytes).",
                                        rich_help_panel=MODEL_PANEL)]
Load8bit = Annotated[bool, typer.Option(
    "--load-8bit", help="Hold the linear layers' weights in int8, one scale per row: half the bytes of bf16, so "
                        "faster decoding on the CPU.", rich_help_panel=MODEL_PANEL)]
MaxMemory = Annotated[Optional[str], typer.Option(
    "--max-memory", help="Hold at most this much of the model's weights in memory (such as 2GiB); the rest stays on "
                         "disk in its safetensors file and is read layer by layer as it runs. CPU only; for a .gguf "
                         "file, `locret convert` it first.", rich_help_panel=MODEL_PANEL)]
CompileDecode = Annotated[bool, typer.Option(
    "--compile-decode", help="Decode with a step compiled whole (Llama, Mistral and Qwen2 on the CPU; needs a C++ "
                             "compiler): faster steps after tens of seconds of compiling, for long answers and many "
                             "questions.", rich_help_panel=MODEL_PANEL)]
# the training commands' (`train`, `train-reader`): what a run in --out does with the run already there
SaveEvery = Annotated[int, typer.Option(help="Checkpoint every N steps.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in --out.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace what a finished run left in --out.")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code. Off unless "
                                               "asked.", rich_help_panel=MODEL_PANEL)]
Arch = Annotated[Optional[str], typer.Option(
    "--arch", help="A shape preset with random weights: smollm2-135m, qwen2.5-0.5b, qwen2.5-1.5b, llama-3.2-1b, "
                   "llama-3.1-8b, phi-3-mini-128k, gemma3-1b, gemma3-4b or gemma3-12b (each gemma3 also as -global: "
                   "every layer global). Speed and memory only.", rich_help_panel=MODEL_PANEL)]


def model_options(shapes: bool = False) -> list[inspect.Parameter]:
    """The options that say which model to load and how: ModelSpec's fields, as flags. With `shapes` (the bench,
    whose rows name the policies), --arch in place of --policy."""
    others = [name for name in POLICY_NAMES if name != DEFAULT_POLICY]
    policy = Annotated[Optional[str], typer.Option(
        "--policy", help=f"Eviction policy: {DEFAULT_POLICY} (default), {', '.join(others[:-1])} or {others[-1]}.",
        rich_help_panel=MODEL_PANEL)]
    declared = [("model", ModelName, None), ("arch", Arch, None) if shapes else ("policy", policy, None),
                ("heads", Heads, None), ("reader", Reader, None), ("device", Device, "auto"), ("dtype", Dtype, "auto"),
                ("load_4bit", Load4bit, False), ("load_8bit", Load8bit, False), ("max_memory", MaxMemory, None),
                ("trust_remote_code", TrustRemoteCode, False), ("compile_decode", CompileDecode, False)]
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, annotation, default in declared]


def setting_options(kind: type, panel: str) -> list[inspect.Parameter]:
    """One option per field of the settings dataclass `kind`, from its declaration; None (not given) by default."""
    types = typing.get_type_hints(kind)
    options = []
    for spec in fields(kind):
        text = f"{spec.metadata['help']} Default {shown_value(spec.default)}, or the model's recorded default."
        flags = (spec.metadata["flag"],) if spec.metadata["flag"] else ()
        option = typer.Option(*flags, help=text, rich_help_panel=panel)
        options.append(inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                         annotation=Annotated[Optional[types[spec.name]], option]))
    return options


@dataclass(frozen=True)
class Group:
    """Options a command takes, and the one argument (`target`) they become."""

    target: str
    options: Callable[[], list[inspect.Parameter]]
    collect: Callable[[dict], object]


def given_only(options: dict) -> dict:
    """The settings given on the command line: those left out (None) take the model's recorded defaults."""
    return {name: value for name, value in options.items() if value is not None}


MODEL = Group("spec", model_options, lambda given: ModelSpec(**given))
SHAPES = Group("spec", lambda: model_options(shapes=True), lambda given: ModelSpec(**given))  # the bench's
READING = Group("read", lambda: setting_options(ReadSettings, READING_PANEL), given_only)
ANSWERING = Group("answer", lambda: setting_options(AnswerSettings, ANSWERING_PANEL), given_only)
SETTINGS = Group("settings", lambda: setting_options(ReadSettings, READING_PANEL) +  # the bench's: every one
                 setting_options(AnswerSettings, ANSWERING_PANEL), given_only)


def option_groups(*groups: Group):
    """Add each group's options to the command, after its arguments, and call it with each group's `target`."""

    def decorate(command):
        own = inspect.signature(command, eval_str=True).parameters.values()
        arguments = [p for p in own if p.name not in {g.target for g in groups}]
        added = {group.target: group.options() for group in groups}
        first = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in arguments if is_argument(p)]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in arguments if not is_argument(p)]
        shown = first + [p for options in added.values() for p in options] + rest

        @functools.wraps(command)
        def wrapper(**given):
            for group in groups:
                mine = {p.name: given.pop(p.name) for p in added[group.target]}
                given[group.target] = group.collect(mine)
            return command(**given)

        wrapper.__signature__ = inspect.Signature(shown)
        wrapper.__annotations__ = {p.name: p.annotation for p in shown}
        return wrapper

    return decorate


def is_argument(parameter: inspect.Parameter) -> bool:
    """Whether a command's parameter is a positional typer.Argument."""
    return any(isinstance(meta, typer.models.ArgumentInfo) for meta in getattr(parameter.annotation, "__metadata__",
                                                                               ()))
