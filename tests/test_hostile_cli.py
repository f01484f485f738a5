"""The command line prints text from the input as written, never as Rich markup; with --json an error is one JSON
object on stdout; --force and --no-memory-check are apart; settings' upper bounds hold."""

from __future__ import annotations

import io
import json

import pytest
from helpers.pdfs import raw_pdf
from typer.testing import CliRunner

from locret_cli.bench.output import bench_table
from locret_cli.bench.suite import ROW_FIELDS, BenchResult
from locret_cli.cli import app
from locret_cli.cli.app import plain_console
from locret_cli.core import measure

runner = CliRunner()
GATE_Q, GATE = "What is the gate code of the north depot?", "The gate code of the north depot is 4821."
FILLER = "The river bends past the old mill, where the miller counts his sacks twice a day. "
DOCUMENT = (FILLER * 5 + GATE + " " + FILLER * 5).encode()
COLOURS = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "400"}  # styles and links written, if any
HYPERLINK = "\x1b]8;"


def invoke(*args, input=None, env=None):
    return runner.invoke(app, [str(arg) for arg in args], input=input, env=env)


def document_at(path, data: bytes = DOCUMENT):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def one_json_object(result) -> dict:
    """stdout's one JSON document, on one line."""
    assert result.stdout.count("\n") == 1, result.stdout
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["a[/]b.txt", "[link=http://x]y[/link].txt"])
def test_a_name_holding_markup_is_answered_and_printed_as_written(tmp_path, name):
    path = document_at(tmp_path / name, DOCUMENT + b"\xff")  # one invalid byte: a warning names the file
    result = invoke("ask", path, GATE_Q, "--no-strict", env=COLOURS)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(GATE + "\n")
    assert f"{path}: 1 invalid" in result.stderr
    assert HYPERLINK not in result.stdout + result.stderr
    assert path.read_bytes() == DOCUMENT + b"\xff"


def test_questions_holding_markup_are_shown_as_asked(tmp_path):
    path = document_at(tmp_path / "doc.txt")
    asked = [GATE_Q + " [/]", "[bold]" + GATE_Q]
    result = invoke("ask", path, "-Q", asked[0], "-Q", asked[1], "--no-strict", env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert all(question in result.stdout for question in asked) and "4821" in result.stdout


def test_a_pdf_whose_page_warning_holds_markup_is_answered_with_json(tmp_path):
    body = GATE.encode()
    pages = [b"BT /F1 12 Tf 72 720 Td (" + body + b") Tj ET", b"BT /F1 12 Tf 72 720 Td (lost) Tj ET"]
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R 5 0 R] /Count 2 >>"]
    for number, (stream, extra) in enumerate(zip(pages, [b"", b"/Filter /Nope "])):
        objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                    b"/Resources << /Font << /F1 7 0 R >> >> >>" % (4 + 2 * number),
                    b"<< /Length %d %s>>\nstream\n%s\nendstream" % (len(stream), extra, stream)]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    (tmp_path / "r[" / "x]").mkdir(parents=True)
    path = raw_pdf(tmp_path / "r[/x]" / "two.pdf", objects)  # its page 2 cannot be read: the warning names the path
    before = path.read_bytes()
    result = invoke("ask", path, GATE_Q, "--json", "--no-strict")
    assert result.exit_code == 0, result.output
    answer = one_json_object(result)
    assert "4821" in answer["answer"] and any(f"{path}: page 2 skipped" in w for w in answer["warnings"])
    assert f"warning: {path}: page 2 skipped" in result.stderr
    assert path.read_bytes() == before


def test_chat_about_a_name_holding_markup(tmp_path):
    path = document_at(tmp_path / "[link=http://x]y[/link].txt")
    result = invoke("chat", path, input=f"{GATE_Q}\n/quit\n", env=COLOURS)
    assert result.exit_code == 0, result.output
    assert GATE in result.stdout and str(path) in result.stderr
    assert HYPERLINK not in result.stdout + result.stderr
    assert path.read_bytes() == DOCUMENT


def test_the_kept_map_title_holds_a_name_as_written(tmp_path):
    pytest.importorskip("matplotlib")
    path = document_at(tmp_path / "$\\foo$ [b].txt")  # mathtext and markup, both text in a title
    picture = tmp_path / "kept.png"
    result = invoke("ask", path, GATE_Q, "--kept-map", picture, "--no-strict")
    assert result.exit_code == 0, result.output
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, kind, message", [
    (["ask", "{tmp}/missing.txt", GATE_Q, "--json"], "input", "no such file: {tmp}/missing.txt"),
    (["ask", "{tmp}/doc.txt", GATE_Q, "--jsonl", "--budget", "0"], "setting", "--budget must be positive, got 0"),
    (["ask", "{tmp}/doc.txt", GATE_Q, "--json", "--model", "{tmp}/no-model"], "model", "cannot load model"),
    (["read", "{tmp}/missing.txt", "-o", "{tmp}/x.locret", "--json"], "input", "no such file: {tmp}/missing.txt"),
    (["batch", "{tmp}/doc.txt", "--out", "{tmp}/out.jsonl", "--json"], "setting", "give --questions FILE"),
    (["bench", "--tasks", "poems", "--json"], "setting", "unknown task poems"),
])
def test_with_json_an_error_is_one_json_object_on_stdout(tmp_path, args, kind, message):
    document_at(tmp_path / "doc.txt")
    result = invoke(*[arg.format(tmp=tmp_path) for arg in args])
    assert result.exit_code == 1
    error = one_json_object(result)
    assert set(error) == {"error", "kind"} and error["kind"] == kind and message.format(tmp=tmp_path) in error["error"]
    assert result.stderr.splitlines()[-1] == f"error: {error['error']}"
    assert (tmp_path / "doc.txt").read_bytes() == DOCUMENT


def test_with_json_a_run_refused_for_memory_and_an_interrupted_one_say_so(tmp_path, monkeypatch):
    path = document_at(tmp_path / "doc.txt")
    monkeypatch.setattr(measure, "available_memory", lambda device: 1000)
    refused = one_json_object(invoke("ask", path, GATE_Q, "--json"))
    assert refused["kind"] == "memory" and refused["error"].endswith("or pass --no-memory-check to run anyway")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("locret_cli.cli.options.open_reading", interrupted)
    result = invoke("ask", path, GATE_Q, "--json")
    assert result.exit_code == 130 and one_json_object(result) == {"error": "interrupted", "kind": "interrupted"}


def test_a_withheld_answer_is_not_an_error(tmp_path):
    path = document_at(tmp_path / "doc.txt")
    result = invoke("ask", path, "Who counts the sacks?", "--json", "--strict")
    assert result.exit_code == 4
    assert "error" not in one_json_object(result)


@pytest.mark.parametrize("option, value, message", [
    ("--hops", "1000000000", "--hops must be at most 2"),
    ("--seed", str(2**64), "--seed must be at most 18446744073709551615"),  # past what torch takes
    ("--seed", "-1", "--seed must be zero or more"),
])
def test_a_setting_past_its_bounds_is_refused(tmp_path, option, value, message):
    path = document_at(tmp_path / "doc.txt")
    result = invoke("ask", path, GATE_Q, option, value, "-q")
    assert result.exit_code == 1 and result.stderr == f"error: {message}, got {value}\n"


def test_read_force_replaces_the_output_and_no_memory_check_skips_the_check(tmp_path, monkeypatch):
    path, saved = document_at(tmp_path / "doc.txt"), tmp_path / "doc.locret"
    saved.write_bytes(b"kept")
    kept = invoke("read", path, "-o", saved, "-q")
    assert kept.exit_code == 1 and "already exists; choose another path or pass --force to replace it" in kept.stderr
    assert saved.read_bytes() == b"kept"
    monkeypatch.setattr(measure, "available_memory", lambda device: 1000)
    refused = invoke("read", path, "-o", saved, "-q", "--force")
    assert refused.exit_code == 1 and "or pass --no-memory-check to run anyway" in refused.stderr
    assert saved.read_bytes() == b"kept"
    replaced = invoke("read", path, "-o", saved, "-q", "--force", "--no-memory-check")
    assert replaced.exit_code == 0, replaced.output
    assert saved.read_bytes()[:4] != b"kept" and path.read_bytes() == DOCUMENT


def test_ask_kept_map_names_the_force_that_replaces_it(tmp_path):
    pytest.importorskip("matplotlib")
    path, picture = document_at(tmp_path / "doc.txt"), tmp_path / "kept.png"
    picture.write_bytes(b"mine")
    kept = invoke("ask", path, GATE_Q, "--kept-map", picture, "--no-strict")
    assert kept.exit_code == 1
    assert kept.stderr == f"error: {picture} already exists; choose another path or pass --force to replace it\n"
    assert picture.read_bytes() == b"mine"
    replaced = invoke("ask", path, GATE_Q, "--kept-map", picture, "--no-strict", "--force")
    assert replaced.exit_code == 0, replaced.output
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bench_row_skipped_for_a_reason_holding_markup_stays_yellow():
    row = dict.fromkeys(ROW_FIELDS) | {"task": "[bold]needle", "length": 4096, "policy": "full", "skipped": "[/x] no"}
    config = {"model_name": "m", "settings": {}, "matmul_flops_per_s": 1e12, "memory_bytes_per_s": 1e9,
              "accuracy_meaningful": True}
    out = io.StringIO()
    plain_console(file=out, force_terminal=True, color_system="standard", width=300).print(
        bench_table(BenchResult(config, [row])))
    assert "[bold]needle" in out.getvalue() and "\x1b[33mskipped: [/x] no" in out.getvalue()
