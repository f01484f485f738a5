"""Reading inputs: PDFs page by page, text in any encoding, stdin, incremental tokenization, and bad input."""

from __future__ import annotations

import io

import pytest
from helpers.pdfs import encrypted_pdf, image_only_pdf, text_pdf

from locret_cli.errors import LocretError
from locret_cli.inputs.documents import TEXT_BLOCK_CHARS, open_document, token_chunks
from locret_cli.inputs.tokenizer import TiktokenTokenizer

BYTES = TiktokenTokenizer.byte_level()


def all_text(document) -> str:
    return "".join(segment.text for segment in document.segments())


def test_pdf_pages_are_read_in_order_with_page_numbers(tmp_path):
    path = text_pdf(tmp_path / "a.pdf", ["first page", "second page", "third page"])
    document = open_document(str(path))
    assert (document.kind, document.pages, document.unit, document.total_units) == ("pdf", 3, "pages", 3)
    segments = list(document.segments())
    assert [s.page for s in segments] == [1, 2, 3]
    assert [s.text.strip() for s in segments] == ["first page", "second page", "third page"]
    chunks = list(token_chunks(open_document(str(path)), BYTES, 8, prefix_ids=[]))
    assert chunks[0].first_page == 1 and chunks[-1].last_page == 3


def test_chunks_have_the_exact_size_and_carry_the_prefix(tmp_path):
    text = "word " * 30000  # longer than one text block, so it is cut and tokenized in pieces
    assert len(text) > TEXT_BLOCK_CHARS
    (tmp_path / "t.txt").write_text(text)
    chunks = list(token_chunks(open_document(str(tmp_path / "t.txt")), BYTES, 1000, prefix_ids=[7, 7]))
    assert [len(c.ids) for c in chunks] == [1000] * 150 + [2]
    assert [i for c in chunks for i in c.ids] == [7, 7] + BYTES.encode(text)
    assert chunks[-1].units_done == len(text)


def test_invalid_bytes_are_replaced_with_a_warning(tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 ok \xff\xfe!")
    document = open_document(str(tmp_path / "bad.txt"))
    assert all_text(document) == "caf\ufffd ok \ufffd\ufffd!"
    assert document.warnings == [f"{tmp_path / 'bad.txt'}: 3 invalid utf-8 byte(s) replaced with U+FFFD; "
                                 "pass --encoding if the file is not UTF-8"]


def test_other_encodings(tmp_path):
    (tmp_path / "u16.txt").write_bytes("naïve résumé".encode("utf-16"))
    assert all_text(open_document(str(tmp_path / "u16.txt"))) == "naïve résumé"
    (tmp_path / "l1.txt").write_bytes("naïve".encode("latin-1"))
    document = open_document(str(tmp_path / "l1.txt"), encoding="latin-1")
    assert all_text(document) == "naïve" and document.warnings == []
    with pytest.raises(LocretError, match="unknown encoding"):
        open_document(str(tmp_path / "l1.txt"), encoding="klingon")


def test_stdin():
    document = open_document("-", stdin=io.BytesIO(b"from a pipe"))
    assert document.name == "<stdin>" and all_text(document) == "from a pipe"


@pytest.mark.parametrize("content", [b"", b"  \n\t \n"])
def test_empty_input_is_an_error(tmp_path, content):
    (tmp_path / "e.txt").write_bytes(content)
    with pytest.raises(LocretError, match="is empty"):
        list(token_chunks(open_document(str(tmp_path / "e.txt")), BYTES, 8, prefix_ids=[1]))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(LocretError, match="no such file"):
        open_document(str(tmp_path / "nope.txt"))
    with pytest.raises(LocretError, match="is a directory"):
        open_document(str(tmp_path))


def test_corrupt_pdf(tmp_path):
    (tmp_path / "c.pdf").write_bytes(b"%PDF-1.7\nthis is not really a pdf\n")
    with pytest.raises(LocretError, match="not a readable PDF"):
        open_document(str(tmp_path / "c.pdf"))


def test_encrypted_pdf(tmp_path):
    source = text_pdf(tmp_path / "plain.pdf", ["secret text"])
    with pytest.raises(LocretError, match="is encrypted"):
        open_document(str(encrypted_pdf(tmp_path / "locked.pdf", source)))


def test_pdf_without_text_layer(tmp_path):
    document = open_document(str(image_only_pdf(tmp_path / "scan.pdf")))
    with pytest.raises(LocretError, match="no text layer"):
        list(token_chunks(document, BYTES, 8, prefix_ids=[]))


def test_tokenizer_round_trip(tmp_path):
    text = "Ünïcödé, digits 0123 and <|end|> markers"
    ids = BYTES.encode(text)
    assert BYTES.decode(ids) == text.replace("<|end|>", "")
    assert BYTES.decode(ids + [len(BYTES) + 5]) == BYTES.decode(ids)  # ids of a padded vocabulary
    BYTES.save(tmp_path / "ranks.tiktoken")
    again = TiktokenTokenizer.from_file(tmp_path / "ranks.tiktoken")
    assert again.encode(text) == ids
