"""`locret chat`: an interactive conversation about one document, read once (or loaded from a .locret file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from locret_cli.cli import options
from locret_cli.cli.app import app, domain_errors, error, plain_console, warn
from locret_cli.cli.option_groups import ANSWERING, ANSWERING_PANEL, MODEL, READING, option_groups
from locret_cli.errors import LocretError
from locret_cli.files import CONTEXT_SUFFIX, check_output, is_saved_context
from locret_cli.models.spec import ModelSpec

HELP = ("Ask anything about the document. /sources lists what the last answer drew on; /save FILE writes the "
        "conversation (JSONL), /save FILE.locret the read document; /quit ends (so does Ctrl-D). Ctrl-C stops an "
        "answer.")


@app.command()
@domain_errors
@option_groups(MODEL, READING, ANSWERING)
def chat(
    source: Annotated[str, typer.Argument(help="A .pdf or text file, or a context saved by `locret read` (.locret).")],
    *,
    spec: ModelSpec,
    read: dict,
    answer: dict,
    history_tokens: Annotated[Optional[int], typer.Option(help="Tokens of earlier turns kept with each question; the oldest go first. Default 1024, or the model's recorded default (the embedded model: 0, it was trained on single questions).", rich_help_panel=ANSWERING_PANEL)] = None,
    encoding: options.Encoding = None,
    no_memory_check: options.NoMemoryCheck = False,
) -> None:
    """Talk about the document at SOURCE: each answer sees the document's cache and the conversation so far."""
    import readline  # noqa: F401  line editing and history for input()

    if source == "-":
        raise LocretError("chat reads its questions from the terminal: give a file, not -")
    err, out = plain_console(stderr=True), plain_console()
    session, reading, plan = options.open_reading(source, spec, read, answer, err, False, encoding, no_memory_check,
                                                  defer=True, history_tokens=history_tokens)
    from locret_cli.api.conversation import Conversation  # with torch, imported by `open_reading`

    history_tokens = plan.history_tokens
    for message in reading.warnings:
        warn(err, message)
    how = (f"loaded from {reading.loaded_from} in {reading.read_s:.3f} s (read in {reading.document.read_s:.1f} s)"
           if reading.loaded_from else f"read in {reading.read_s:.1f} s" if reading.pending is None else
           f"tokenized in {reading.read_s:.1f} s (the bounded read runs for the first answer that needs it)")
    err.print(Text.assemble((reading.document.name, "bold"), f": {reading.document.tokens:,} tokens, {how}; earlier "
                            f"turns kept: {history_tokens:,} tokens. {HELP}"))
    run_chat(Conversation(reading, history_tokens, plan.answer), lambda: input("> "), out, err, session.heads)


def run_chat(conversation, read_line: Callable[[], str], out: Console, err: Console, heads=None) -> None:
    """The read-answer loop, until /quit or end of input. `read_line` raises EOFError at the end and may raise
    KeyboardInterrupt (a new prompt follows); KeyboardInterrupt during an answer stops that answer only."""
    from locret_cli.api.reading import SOURCES_SHOWN
    from locret_cli.cli.report import sources_line

    while True:
        try:
            line = read_line().strip()
        except EOFError:
            break
        except KeyboardInterrupt:
            err.print()
            continue
        if not line:
            continue
        if line in ("/quit", "/exit"):
            break
        try:
            if line.startswith("/"):
                command(conversation, line, out, err, heads)
                continue
            for message in conversation.reading.answer_warnings(line, conversation.answering):
                warn(err, message)
            answer_turn(conversation, line, out, err)
        except LocretError as exc:
            error(err, exc)
            continue
        except KeyboardInterrupt:
            out.print()
            err.print(Text("(answer stopped)", style="yellow"))
            continue
        last = conversation.results[-1]
        if last.sources or last.windows:
            out.print(sources_line((last.sources or [])[:SOURCES_SHOWN], last.windows), style="dim", markup=False)


def answer_turn(conversation, question: str, out: Console, err: Console) -> None:
    """Answer one turn, printing the answer as it is decoded (once checked, where an answer may be withheld), then a
    line on stderr if its content is not in the document."""
    from locret_cli.cli.report import DocumentProgress, grounding_warning

    tokenizer, tokens, shown = conversation.reading.tokenizer, [], ""
    answering = conversation.answering or conversation.reading.answering
    strict = answering.may_withhold  # the answer is checked before it is shown

    def stream(token: int) -> None:
        nonlocal shown
        tokens.append(token)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            out.print(text[len(shown):].lstrip() if not shown else text[len(shown):], end="", markup=False)
            shown = text
    with DocumentProgress(err) as bar:  # opens only if this answer runs the bounded read; shut before its tokens
        def shown_after_the_bar(token: int) -> None:
            bar.close()
            stream(token)

        result = conversation.ask(question, on_token=None if strict else shown_after_the_bar, on_read=bar.update)
    out.print(result.answer if strict else "", markup=False)
    if warning := grounding_warning(result):
        err.print(warning)


def command(conversation, line: str, out: Console, err: Console, heads) -> None:
    """/sources, /save FILE, /help."""
    name, _, argument = line.partition(" ")
    argument = argument.strip()
    if name == "/sources":
        last = conversation.results[-1] if conversation.results else None
        if last is None:
            err.print("no answer yet")
            return
        for source in last.sources or []:
            out.print(f"{source.label():>16}  {source.weight:.3f}", markup=False)
    elif name == "/save":
        if not argument:
            raise LocretError("/save needs a file name: FILE for the conversation, FILE.locret for the document")
        if is_saved_context(argument):
            from locret_cli.api.saved_context import save_reading
            from locret_cli.cli.report import DocumentProgress

            check_output(argument, False, CONTEXT_SUFFIX)  # refused before a pending read, not after it
            with DocumentProgress(err) as bar:
                conversation.reading.read_now(bar.update)
            saved = save_reading(conversation.reading, argument, heads)
            err.print(f"saved the read document to {saved.path} ({saved.size_bytes:,} bytes)", markup=False)
        else:
            conversation.save_transcript(argument)
            err.print(f"saved {len(conversation.results)} turns to {argument}", markup=False)
    elif name == "/help":
        err.print(HELP)
    else:
        raise LocretError(f"unknown command {name}; try /help")
