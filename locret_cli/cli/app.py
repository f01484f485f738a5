"""The `locret` Typer app, and what every command shares: one-line errors (settings named as flags) and exit codes.

Command modules (`ask`, `chat`, `batch`, `bench`, `train`, `convert`) register themselves on `app`; `cli/__init__.py`
imports them.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from locret_cli.errors import LocretError, SettingError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Ask questions of documents far longer than a normal KV cache could hold (Locret, arXiv 2410.01805).",
)


def _print_version(value: bool) -> None:
    if value:
        from locret_cli import __version__

        sys.stdout.write(f"locret {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Read documents once and ask them questions; train heads; benchmark policies."""


WITHHELD_EXIT = 4  # the exit status when --strict withheld an answer


def flag(setting: str) -> str:
    """The command-line flag that sets the library's `setting`: `chunk_size` is `--chunk-size`."""
    return "--" + setting.replace("_", "-")


def render(message: str | LocretError) -> str:
    """A library message as the command line says it: the settings it names, as flags."""
    return message.render(flag) if isinstance(message, SettingError) else str(message)


def domain_errors(command):
    """Turn LocretError into one line on stderr (settings named by their flags) and exit status 1; Ctrl-C into
    status 130."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LocretError as exc:
            console = Console(stderr=True, highlight=False, soft_wrap=True)
            console.print("[bold red]error:[/] " + escape(render(exc)), markup=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            Console(stderr=True).print("interrupted")
            raise typer.Exit(130) from None

    return wrapper
