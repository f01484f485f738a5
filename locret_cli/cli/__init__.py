"""The `locret` command line: parse, call the API, render. Nothing else lives here.

`app.py` holds the Typer app and its error handling; one module per command family registers on it: `ask` (read,
ask), `chat`, `batch`, `train`, `train_reader`, `bench` and `convert`; shared options in `option_groups` and `options`.
"""

from __future__ import annotations

import gc

from locret_cli.cli import ask, batch, bench, chat, convert, train, train_reader  # noqa: F401  registers the commands on `app`
from locret_cli.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Run the command, then move every object left (about 340,000 once torch and transformers are imported) out of
    the garbage collector's sight: otherwise Python's collections at exit walk them all, a noticeable share of a
    short command's time (docs/measurements/what-makes-it-fast.md, item 8)."""
    try:
        app()
    finally:
        gc.freeze()
