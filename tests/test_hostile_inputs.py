"""Hostile files: every input either reads (and answers) or gives one error line, never an uncaught exception.

Fuzzed with hypothesis, derandomized so CI runs the same cases every time: 120 mutated or truncated PDFs and 150
arbitrary byte strings under six encodings go through the reader and tokenizer; hand-made PDFs with 200,000 objects,
50,000-deep arrays, a 3,000-deep or cyclic page tree, and a 1 GiB sparse file go through `locret ask` itself.
"""

from __future__ import annotations

import pytest
from helpers.pdfs import one_page_objects, raw_pdf, text_pdf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import open_document, token_chunks
from locret_cli.models.embedded import load_embedded

runner = CliRunner()
FUZZ = dict(derandomize=True, database=None, deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
ENCODINGS = [None, "utf-8", "utf-16", "utf-32", "latin-1", "cp1252"]


@pytest.fixture(scope="module")
def tokenizer():
    return load_embedded("cpu")[0].tokenizer


@pytest.fixture(scope="module")
def base_pdf(tmp_path_factory):
    path = tmp_path_factory.mktemp("pdf") / "base.pdf"
    return text_pdf(path, ["The gate code of the north depot is 4821.", "Second page.", "Third page."]).read_bytes()


def read_all(path, tokenizer, encoding=None) -> int:
    """Read and tokenize the whole input as `ask` does; returns the token count. May raise only LocretError."""
    chunks = token_chunks(open_document(str(path), encoding=encoding), tokenizer, 512, [0])
    return sum(len(chunk.ids) for chunk in chunks)


def reads_or_refuses(path, tokenizer, encoding=None) -> None:
    try:
        assert read_all(path, tokenizer, encoding) > 0
    except LocretError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=120, **FUZZ)
@given(data=st.data())
def test_mutated_and_truncated_pdfs(tmp_path, base_pdf, tokenizer, data):
    damaged = bytearray(base_pdf[: data.draw(st.integers(0, len(base_pdf)), label="truncate at")])
    for _ in range(data.draw(st.integers(0, 12), label="mutations")):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    (tmp_path / "fuzz.pdf").write_bytes(bytes(damaged))
    reads_or_refuses(tmp_path / "fuzz.pdf", tokenizer)


@settings(max_examples=150, **FUZZ)
@given(content=st.binary(max_size=4096), encoding=st.sampled_from(ENCODINGS))
def test_arbitrary_bytes_under_any_encoding(tmp_path, tokenizer, content, encoding):
    (tmp_path / "fuzz.txt").write_bytes(content)
    reads_or_refuses(tmp_path / "fuzz.txt", tokenizer, encoding)


@settings(max_examples=60, **FUZZ)
@given(text=st.text(max_size=2000), encoding=st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1"]))
def test_any_text_written_in_a_wrong_encoding_reads_with_a_warning_at_worst(tmp_path, tokenizer, text, encoding):
    (tmp_path / "t.txt").write_bytes(text.encode(encoding, errors="replace"))
    reads_or_refuses(tmp_path / "t.txt", tokenizer)  # read as UTF-8 unless a BOM says otherwise


def ask(path, *extra):
    return runner.invoke(app, ["ask", str(path), "What is the gate code of the north depot?", "-q",
                               "--max-new-tokens", "16", *extra])


def assert_one_error_line(result, says: str) -> None:
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error:") and says in result.stderr


def deep_page_tree(depth: int) -> list[bytes]:
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    objects += [b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % (n + 1) for n in range(2, depth + 2)]
    page = one_page_objects("The gate code of the north depot is 4821.")[2:]
    return objects + [page[0].replace(b"4 0 R", b"%d 0 R" % (depth + 3)).replace(b"5 0 R", b"%d 0 R" % (depth + 4))
                      .replace(b"/Parent 2 0 R ", b"")] + page[1:]


def test_a_pdf_with_200000_objects_is_answered(tmp_path):
    objects = one_page_objects("The gate code of the north depot is 4821.") + [b"<< /N %d >>" % i
                                                                                for i in range(200_000)]
    result = ask(raw_pdf(tmp_path / "many.pdf", objects))
    assert result.exit_code == 0, result.output
    assert result.stdout == "The gate code of the north depot is 4821.\n"


@pytest.mark.parametrize("name, objects, says", [
    ("deep-array", one_page_objects("x", b"/Deep " + b"[" * 50_000 + b"]" * 50_000 + b" "), "not a readable PDF"),
    ("deep-tree", deep_page_tree(3000), "not a readable PDF"),
    ("cyclic-tree", [*one_page_objects("x")[:1], b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>",
                     *one_page_objects("x")[2:]], "not a readable PDF"),
])
def test_malicious_pdf_structures_give_one_line(tmp_path, name, objects, says):
    assert_one_error_line(ask(raw_pdf(tmp_path / f"{name}.pdf", objects)), says)


def test_a_one_gib_sparse_file_is_refused_as_binary_at_once(tmp_path):
    path = tmp_path / "sparse.txt"
    with path.open("wb") as f:
        f.write(b"The gate code of the north depot is 4821.\n")
        f.truncate(1 << 30)  # a hole: a GiB of NUL bytes that takes no disk
    assert_one_error_line(ask(path), "holds binary data (NUL bytes after byte 0)")


def test_a_few_nul_bytes_in_text_are_read_as_text(tmp_path):
    path = tmp_path / "nul.txt"
    path.write_bytes(b"Filler words.\x00 " * 10 + b"Filler words. " * 190 + b"The gate code of the north depot is 4821. ")
    result = ask(path)
    assert result.exit_code == 0, result.output
    assert result.stdout == "The gate code of the north depot is 4821.\n"


@pytest.mark.parametrize("content, encoding, says", [
    (b"%PDF-1.7\n", None, "not a readable PDF"),
    (b"", None, "is empty"),
    ("caf\u00e9 text".encode("utf-16-le") * 50, None, "holds binary data"),  # UTF-16 without a BOM
    (b"plain text", "hex", "unknown encoding 'hex'"),
])
def test_other_hostile_inputs_give_one_line(tmp_path, content, encoding, says):
    path = tmp_path / ("bad.pdf" if content.startswith(b"%PDF") else "bad.txt")
    path.write_bytes(content)
    assert_one_error_line(ask(path, *(["--encoding", encoding] if encoding else [])), says)
