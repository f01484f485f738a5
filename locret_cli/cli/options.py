"""Options shared by `read`, `ask` and `chat`, and the one way they become a session and a reading."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from locret_cli.cli.app import warn
from locret_cli.cli.option_groups import OUTPUT_PANEL, READING_PANEL
from locret_cli.errors import LocretError
from locret_cli.files import is_saved_context

Encoding = Annotated[Optional[str], typer.Option(help="Text encoding of the input. Default: UTF-8, or as its BOM says.", rich_help_panel=OUTPUT_PANEL)]
Force = Annotated[bool, typer.Option("--force", help="Replace the files given to write (-o, --kept-map) where they exist.", rich_help_panel=OUTPUT_PANEL)]
NoMemoryCheck = Annotated[bool, typer.Option("--no-memory-check", help="Run even when the estimated memory need exceeds what is free.", rich_help_panel=OUTPUT_PANEL)]
KeptMap = Annotated[Optional[str], typer.Option("--kept-map", help="Also draw the entries kept per page (or line range), cited ones marked, to this PNG.", rich_help_panel=OUTPUT_PANEL)]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="Print only the answer.", rich_help_panel=OUTPUT_PANEL)]
NoSources = Annotated[bool, typer.Option("--no-sources", help="Do not work out which pages each answer drew on.", rich_help_panel=OUTPUT_PANEL)]
ReadFirst = Annotated[bool, typer.Option("--read-first", rich_help_panel=READING_PANEL, help="Run the bounded read before answering even when no answer needs it. With --reread and --locate words or bm25 an answer comes from the windows the question's words name, so by default the read runs only for a question that names none.")]


def open_reading(source: str, spec, read: dict, answer: dict, err: Console, quiet: bool,
                 encoding: Optional[str] = None, no_memory_check: bool = False, questions: Sequence[str] = (),
                 defer: bool = False, history_tokens: Optional[int] = None):
    """(session, reading, plan): the run's plan (`api/plan.py`) with the `spec` model and the settings given, and
    `source` opened by it: a `.locret` file loaded (its read settings, the policy among them, are the file's: giving
    others is an error), or a document read with a progress bar (for `questions` under a policy that reads with them; with
    `defer`, tokenized and its bounded read left for the first answer that needs it), refused when it is estimated
    not to fit in free memory unless `no_memory_check`. The plan's warnings are the reading's (`Reading.warnings`)."""
    from locret_cli.inputs.documents import open_document

    if source == "-" and sys.stdin.isatty():
        raise LocretError("SOURCE is -, but nothing is piped into stdin")
    saved = is_saved_context(source)
    document = None if saved else open_document(source, encoding=encoding, prefetch=True)
    # torch and transformers come in with these, after the document has opened: a missing or unreadable one is
    # reported at once, and a PDF's pages are extracted by a second process meanwhile
    from locret_cli.api import load_session
    from locret_cli.api.plan import read_policy
    from locret_cli.cli.report import DocumentProgress
    from locret_cli.models.library_logs import quiet_libraries

    quiet_libraries()
    policy = read_policy(read, source)
    loading = Text(f"loading {spec.model or 'the embedded model'}")
    with err.status(loading, spinner="dots") if not quiet else nullcontext():
        session = load_session(spec, reads_with=None if saved else policy)
    if spec.model is None and not quiet:
        warn(err, f"no --model given: using the {session.loaded.name}")
    plan = session.plan(read, answer, source=source, questions=questions, defer=defer, history_tokens=history_tokens)
    if saved:
        return session, session.open(source, plan), plan
    with DocumentProgress(err, enabled=not quiet) as progress:
        reading = session.open(document, plan, on_progress=progress.update, force=no_memory_check)
    return session, reading, plan
