"""`locret read` (a document into a saved context) and `locret ask` (one or many questions, with sources)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from locret_cli.cli import options
from locret_cli.cli.app import WITHHELD_EXIT, app, domain_errors, plain_console, warn
from locret_cli.cli.option_groups import ANSWERING, MODEL, OUTPUT_PANEL, READING, option_groups
from locret_cli.errors import LocretError
from locret_cli.files import CONTEXT_SUFFIX, check_output
from locret_cli.models.spec import ModelSpec
from locret_cli.settings import settings_json


@app.command()
@domain_errors
@option_groups(MODEL, READING)
def read(
    source: Annotated[str, typer.Argument(help="A .pdf or text file, or - to read stdin.")],
    output: Annotated[str, typer.Option("-o", "--output", help="Where to save the read context; must end in .locret.")],
    *,
    spec: ModelSpec,
    read: dict,
    encoding: options.Encoding = None,
    kept_map: options.KeptMap = None,
    questions: Annotated[Optional[list[str]], typer.Option("-Q", "--question", help="A question to read the document for (policy finch); repeat for several. Other policies ignore it.")] = None,
    questions_file: Annotated[Optional[str], typer.Option("--questions", help="A file of questions to read the document for (policy finch): one per line, or JSONL with a \"question\" key.")] = None,
    force: options.Force = False,
    no_memory_check: options.NoMemoryCheck = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.", rich_help_panel=OUTPUT_PANEL)] = False,
    quiet: options.Quiet = False,
) -> None:
    """Read the document at SOURCE once and save its bounded cache to OUTPUT, to ask it later with `locret ask`.

    Under --policy finch the read keeps what the given questions attend to; without questions every policy reads
    question-agnostic."""
    from locret_cli.inputs.questions import check_question, load_questions

    err = plain_console(stderr=True)
    check_output(output, force, CONTEXT_SUFFIX)
    if kept_map:
        check_output(kept_map, force, ".png")
    read_for = (questions or []) + (load_questions(questions_file) if questions_file else [])
    for text in read_for:  # before the model loads
        check_question(text)
    session, reading, _ = options.open_reading(source, spec, read, {}, err, quiet, encoding, no_memory_check,
                                                 read_for)
    from locret_cli.api.saved_context import save_reading  # imported by now, with torch, in `open_reading`
    from locret_cli.cli.report import saved_table

    for message in reading.warnings:
        warn(err, message)
    if read_for and not reading.read_for:
        warn(err, f"questions steer only --policy finch, or locret with --question-share above 0; "
                  f"{reading.settings.policy} read the document question-agnostic")
    saved = save_reading(reading, output, session.heads, force)
    if kept_map:
        draw_kept_map(reading, [], kept_map, force)
    if as_json:
        sys.stdout.write(json.dumps({**vars(saved), "document": reading.document.to_json(), "read_s": reading.read_s,
                                     "model": reading.model_name, "policy": reading.settings.policy,
                                     "settings": settings_json(reading.settings),
                                     "read_for": list(reading.read_for)}) + "\n")
    elif not quiet:
        err.print(saved_table(reading, saved))


@app.command()
@domain_errors
@option_groups(MODEL, READING, ANSWERING)
def ask(
    source: Annotated[str, typer.Argument(help="A .pdf or text file, - to read stdin, or a context saved by `locret read` (.locret).")],
    question: Annotated[Optional[str], typer.Argument(help="The question to answer from the document.")] = None,
    questions: Annotated[Optional[list[str]], typer.Option("-Q", "--question", help="A question; repeat for several, all answered from one read.")] = None,
    questions_file: Annotated[Optional[str], typer.Option("--questions", help="A file of questions: one per line, or JSONL with a \"question\" key.")] = None,
    *,
    spec: ModelSpec,
    read: dict,
    answer: dict,
    read_first: options.ReadFirst = False,
    encoding: options.Encoding = None, kept_map: options.KeptMap = None, force: options.Force = False,
    no_memory_check: options.NoMemoryCheck = False,
    no_sources: options.NoSources = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (all the answers) and nothing else.", rich_help_panel=OUTPUT_PANEL)] = False,
    as_jsonl: Annotated[bool, typer.Option("--jsonl", help="Print one JSON line per answer on stdout, as each is ready.", rich_help_panel=OUTPUT_PANEL)] = False,
    quiet: options.Quiet = False,
) -> None:
    """Answer questions from the document at SOURCE, reading it once, with the pages each answer drew on."""
    from locret_cli.inputs.questions import check_question, load_questions

    err, out = plain_console(stderr=True), plain_console()
    asked = ([question] if question is not None else []) + (questions or [])
    asked += load_questions(questions_file) if questions_file else []
    if not asked:
        raise LocretError("give a QUESTION, one or more -Q, or --questions FILE")
    for text in asked:  # before the model loads
        check_question(text)
    if as_json and as_jsonl:
        raise LocretError("choose one of --json and --jsonl")
    if kept_map:
        check_output(kept_map, force, ".png")
    _, reading, plan = options.open_reading(source, spec, read, answer, err, quiet, encoding, no_memory_check,
                                            questions=asked, defer=not (read_first or kept_map))
    answering = plan.answer
    from locret_cli.api.reading import SOURCES_SHOWN  # imported by now, with torch, in `open_reading`
    from locret_cli.cli.report import DocumentProgress

    for message in reading.warnings:
        warn(err, message)
    results = []
    for text in asked:
        for message in [] if quiet else reading.answer_warnings(text, answering):
            warn(err, message)
        with DocumentProgress(err, enabled=not quiet) as bar:  # opens only if this answer runs the bounded read
            result = reading.ask(text, answering, sources=0 if no_sources else SOURCES_SHOWN, on_read=bar.update)
        results.append(result)
        if as_jsonl:
            sys.stdout.write(json.dumps(result.to_json()) + "\n")
            sys.stdout.flush()
    if kept_map:
        draw_kept_map(reading, results[0].sources or [], kept_map, force)
    if as_json:
        document = results[0].to_json() if len(results) == 1 else {"answers": [r.to_json() for r in results]}
        sys.stdout.write(json.dumps(document) + "\n")
    elif not as_jsonl:
        show_answers(results, out, err, quiet)
    if any(result.grounding.withheld is not None for result in results):
        raise typer.Exit(WITHHELD_EXIT)


def show_answers(results, out: Console, err: Console, quiet: bool) -> None:
    """Answers on stdout; sources, grounding warnings and what it cost on stderr (only the answers when quiet)."""
    from locret_cli.cli.report import answers_table, cost_table, grounding_warning, multi_cost_table, sources_line

    if quiet:
        for result in results:
            out.print(result.answer, markup=False)
        return
    if len(results) > 1:
        out.print(answers_table(results))
    for result in results:
        if len(results) == 1:
            out.print(result.answer, markup=False)
            if result.sources or result.windows:
                out.print(sources_line(result.sources, result.windows), style="dim", markup=False)
            if not result.answer:
                warn(err, "the model gave an empty answer (it stopped at once)")
        if warning := grounding_warning(result, "" if len(results) == 1 else f"{result.question} "):
            err.print(warning)
    err.print(cost_table(results[0]) if len(results) == 1 else multi_cost_table(results))


def draw_kept_map(reading, cited, path: str, force: bool = False) -> None:
    from locret_cli.cli.kept_map import write_kept_map

    labels, kept = reading.kept_map()
    title = (f"{Path(reading.document.name).name}: {reading.kept_tokens:,} entries kept per head of "
             f"{reading.document.tokens:,} tokens")
    write_kept_map(labels, kept, [s.label() for s in cited], path, title, force)
