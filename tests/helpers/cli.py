"""The CLI driven in-process: Typer's runner and `ask`."""

from __future__ import annotations

from typer.testing import CliRunner

runner = CliRunner()


def ask(*args, input=None):
    """`locret ask ARGS...` through the CLI runner."""
    from locret_cli.cli import app

    return runner.invoke(app, ["ask", *map(str, args)], input=input)
