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
from locret_cli.settings import AnswerSettings, ReadSettings, shown_value

MODEL_PANEL, READING_PANEL, ANSWERING_PANEL = "Model", "Reading (fixed once the document is read)", "Answering"
OUTPUT_PANEL = "Input and output"


# the training commands' (`train`, `train-reader`): what a run in --out does with the run already there
SaveEvery = Annotated[int, typer.Option(help="Checkpoint every N steps.")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue from the newest checkpoint in --out.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace what a finished run left in --out.")]


def model_options(shapes: bool = False) -> list[inspect.Parameter]:
    """The options that say which model to load and how: ModelSpec's fields as flags, from their declarations
    (`spec.option`). With `shapes` (the bench), --arch too."""
    return [inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=spec.default,
                              annotation=model_option(spec.name))
            for spec in fields(ModelSpec) if shapes or not spec.metadata["shapes"]]


def model_option(name: str):
    """The option of ModelSpec's field `name`, as an annotation a command's parameter can take (`train`'s
    --device, say)."""
    spec = next(spec for spec in fields(ModelSpec) if spec.name == name)
    kind = Optional[str] if spec.default is None else type(spec.default)
    flags = (spec.metadata["flag"] or f"--{name.replace('_', '-')}",)
    return Annotated[kind, typer.Option(*flags, help=spec.metadata["help"], rich_help_panel=MODEL_PANEL)]


def setting_options(kind: type, panel: str, leave_out: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """One option per field of the settings dataclass `kind` but those in `leave_out`, from its declaration; None
    (not given) by default."""
    types = typing.get_type_hints(kind)
    options = []
    for spec in (spec for spec in fields(kind) if spec.name not in leave_out):
        text = f"{spec.metadata['help']} Default {shown_value(spec.default)}, or the model's recorded default."
        flags = (spec.metadata["flag"],) if spec.metadata["flag"] else ()
        option = typer.Option(*flags, help=text, rich_help_panel=panel)
        options.append(inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                         annotation=Annotated[Optional[types[spec.name]], option]))
    return options


def setting_option(kind: type, name: str, panel: str = READING_PANEL):
    """The option of one setting (field `name` of `kind`), as an annotation a command's parameter can take."""
    option = next(p for p in setting_options(kind, panel) if p.name == name)
    return option.annotation


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
SETTINGS = Group("settings", lambda: setting_options(ReadSettings, READING_PANEL, ("policy",)) +  # the bench's: its
                 setting_options(AnswerSettings, ANSWERING_PANEL), given_only)  # rows name the policies


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
