"""The `locret` Typer app, and what every command shares: its consoles, one-line errors and warnings (settings named
as flags), `--json` errors and exit codes.

Command modules (`ask`, `chat`, `batch`, `bench`, `train`, `convert`) register themselves on `app`; `cli/__init__.py`
imports them.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from locret_cli.errors import InsufficientMemoryError, LocretError, SettingError

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


WITHHELD_EXIT = 4  # the exit status when --strict or --refuse-unfound withheld an answer
INTERRUPTED_EXIT = 130
MEMORY_CHECK_FLAG = "--no-memory-check"  # what the library's `force` of a memory refusal is on the command line


def plain_console(stderr: bool = False, **options) -> Console:
    """A console for the command line's output (stdout, or stderr), on which a string prints as written: no Rich
    markup, emoji codes or highlighting, so that file names, questions, answers and a PDF's messages are never read as
    markup; that holds for strings in tables too. Styles come only as `Text` (`warn`, `error`). `options` go to
    Console (soft wrapping, on unless given, leaves long lines whole)."""
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False, **{"soft_wrap": True, **options})


def flag(setting: str) -> str:
    """The command-line flag that sets the library's `setting`: `chunk_size` is `--chunk-size`."""
    return "--" + setting.replace("_", "-")


def render(message: str | LocretError) -> str:
    """A library message as the command line says it: the settings it names, as flags."""
    if isinstance(message, InsufficientMemoryError):
        return message.render(lambda name: MEMORY_CHECK_FLAG if name == "force" else flag(name))
    return message.render(flag) if isinstance(message, SettingError) else str(message)


def warn(console: Console, message: str | LocretError) -> None:
    """A yellow "warning: " and the message, as plain text."""
    console.print(Text.assemble(("warning: ", "yellow"), render(message)))


def error(console: Console, message: str | LocretError) -> None:
    """A bold red "error: " and the message, as plain text."""
    console.print(Text.assemble(("error: ", "bold red"), render(message)))


def domain_errors(command):
    """Turn LocretError into one line on stderr (settings named by their flags) and exit status 1, and Ctrl-C
    (KeyboardInterrupt, whose text, if any, says what was left) into status 130. A command given --json or --jsonl
    also prints the error as one JSON object on stdout: {"error": the line, "kind": the error's `kind`, or
    "interrupted"}."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LocretError as exc:
            message, kind, status = render(exc), exc.kind, 1
            error(plain_console(stderr=True), message)
        except KeyboardInterrupt as exc:
            message, kind, status = str(exc) or "interrupted", "interrupted", INTERRUPTED_EXIT
            plain_console(stderr=True).print(message)
        if kwargs.get("as_json") or kwargs.get("as_jsonl"):
            sys.stdout.write(json.dumps({"error": message, "kind": kind}) + "\n")
        raise typer.Exit(status) from None

    return wrapper
