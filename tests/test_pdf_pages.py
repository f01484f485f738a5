"""A PDF's pages extracted by a second process ahead of the reader: the same pages as this process extracts, and this
process takes over whatever the helper does not deliver."""

from __future__ import annotations

import json
import sys

import pytest
from helpers.pdfs import raw_pdf
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.inputs import pdf_pages
from locret_cli.inputs.documents import open_document
from locret_cli.inputs.pdf_pages import open_pdf, page_texts

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def three_pages(tmp_path):
    """A PDF whose second page's content stream has a filter no reader knows, so its text cannot be read."""
    def page(contents: int) -> bytes:
        return (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 9 0 R >> >> >>" % contents)

    def stream(text: bytes, extra: bytes = b"") -> bytes:
        body = b"BT /F1 12 Tf 72 720 Td (" + text + b") Tj ET"
        return b"<< /Length %d %s>>\nstream\n%s\nendstream" % (len(body), extra, body)

    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R 5 0 R 7 0 R] /Count 3 >>",
               page(4), stream(b"The gate code of the north depot is 4821."), page(6),
               stream(b"unreadable", b"/Filter /Nope "), page(8), stream(b"Third page."), FONT]
    return raw_pdf(tmp_path / "three.pdf", objects)


def in_process(path):
    pdf = open_pdf(path)
    try:
        return list(page_texts(pdf, path))
    finally:
        pdf.close()


def test_the_helper_sends_every_page_as_this_process_extracts_it(tmp_path, monkeypatch):
    path = three_pages(tmp_path)
    expected = in_process(path)
    assert [(number, text.strip()) for number, text, _ in expected] == [
        (1, "The gate code of the north depot is 4821."), (2, ""), (3, "Third page.")]
    assert [warning is not None and "page 2 skipped" in warning for _, _, warning in expected] == [False, True, False]

    def no_page_here(*args):
        raise AssertionError("this process extracted a page the helper should have sent")

    pdf = open_pdf(path, prefetch=True)
    helper = pdf.helper
    monkeypatch.setattr(pdf_pages, "page_text", no_page_here)
    assert list(page_texts(pdf, path)) == expected
    assert helper.returncode == 0 and pdf.helper is None
    pdf.close()


def helper_sending(lines: list) -> list[str]:
    """A stand-in helper command that prints `lines` (JSON-encoded where not a str) and exits."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    return [sys.executable, "-c", f"import sys; sys.stdout.write({text!r})"]


SENT = "page one, as the helper sent it"


@pytest.mark.parametrize("lines, delivered", [
    ([], 0),                                                        # exits at once
    ([[1, SENT, None]], 1),                                         # stops after one page
    ([[1, SENT, None], [3, "x", None]], 1),                         # skips a page
    ([[1, SENT, None], "not json"], 1),
    ([[1, 42, None]], 0),                                           # text that is not text
    ([7], 0),                                                       # not a page at all
    ([[1, "a", None], [2, "b", None], [3, "c", None], [4, "a page the file does not have", None]], 3),
], ids=["exits", "stops", "skips", "garbage", "wrong-type", "a-number", "too-many"])
def test_a_helper_that_fails_is_replaced_by_this_process_from_the_page_it_missed(tmp_path, monkeypatch, lines,
                                                                                 delivered):
    path = three_pages(tmp_path)
    expected = in_process(path)
    monkeypatch.setattr(pdf_pages, "helper_command", lambda path: helper_sending(lines))
    pdf = open_pdf(path, prefetch=True)
    got = list(page_texts(pdf, path))
    pdf.close()
    assert [number for number, _, _ in got] == [1, 2, 3]
    assert [text for _, text, _ in got[:delivered]] == [line[1] for line in lines[:delivered]]
    assert got[delivered:] == expected[delivered:]


def test_a_helper_that_cannot_start_leaves_every_page_to_this_process(tmp_path, monkeypatch):
    path = three_pages(tmp_path)
    monkeypatch.setattr(pdf_pages, "helper_command", lambda path: [str(tmp_path / "no-such-python")])
    pdf = open_pdf(path, prefetch=True)
    assert pdf.helper is None
    assert list(page_texts(pdf, path)) == in_process(path)
    pdf.close()


def test_stopping_the_reading_early_stops_the_helper(tmp_path, monkeypatch):
    path = three_pages(tmp_path)
    helpers = []
    start = pdf_pages._start_helper
    monkeypatch.setattr(pdf_pages, "_start_helper", lambda path: helpers.append(start(path)) or helpers[-1])
    segments = open_document(str(path), prefetch=True).segments()
    assert next(segments).page == 1
    segments.close()
    assert helpers[0].poll() is not None and helpers[0].stdout.closed


def test_ask_extracts_a_pdfs_pages_in_the_helper(tmp_path, monkeypatch):
    path = three_pages(tmp_path)
    started = []
    start = pdf_pages._start_helper
    monkeypatch.setattr(pdf_pages, "_start_helper", lambda path: started.append(path) or start(path))
    result = CliRunner().invoke(app, ["ask", str(path), "What is the gate code of the north depot?", "-q",
                                      "--max-new-tokens", "16"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "The gate code of the north depot is 4821.\n"
    assert started == [path]


def test_a_pdf_of_more_pages_than_the_helper_takes_gets_none(tmp_path, monkeypatch):
    path = three_pages(tmp_path)
    monkeypatch.setattr(pdf_pages, "PREFETCH_MAX_PAGES", 2)
    pdf = open_pdf(path, prefetch=True)
    assert pdf.helper is None
    assert list(page_texts(pdf, path)) == in_process(path)
    pdf.close()
