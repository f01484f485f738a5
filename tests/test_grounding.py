"""Answers checked against the document's text: exact spans and places, statuses, --strict, saved contexts, batch."""

from __future__ import annotations

import json
import struct

import pytest
from helpers.documents import FILLER
from helpers.pdfs import text_pdf
from typer.testing import CliRunner

from locret_cli.api import load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.checks.grounding import REFUSAL, DocumentText, ground, specific_runs
from locret_cli.cli import app
from locret_cli.errors import LocretError

runner = CliRunner()
TEXT = DocumentText(["The mill grinds wheat. " + FILLER * 5
                     + "The chief engineer of the salt warehouse is Ingrid Halvorsen.",
                     FILLER * 3 + "The gate code of the north depot is 4821. Call it the \"blue door\" code, A-17."],
                    ["p. 1", "p. 2"])
GATE = "What is the gate code of the north depot?"
ENGINEER = "What is the chief engineer of the salt warehouse?"


def test_the_specific_content_is_what_the_question_does_not_hold():
    assert specific_runs("The gate code of the north depot is 4821.", GATE) == [["4821"]]
    assert specific_runs("It is Lord Ashby, in 1820.", "Who signed it?") == [["lord", "ashby"], ["1820"]]
    assert specific_runs('They call it "the blue door".', "What do they call it?") == [["the", "blue", "door"]]
    assert specific_runs("The gate code of the north depot is the one stated.", GATE) == [["one"]]


@pytest.mark.parametrize("framed", ["According to the passage, the gate code of the north depot is 4821.",
                                    "According to the text the gate code of the north depot is 4821.",
                                    "In the document, the gate code of the north depot is 4821.",
                                    "According to Halvorsen, the gate code of the north depot is 4821."])
def test_where_the_model_says_it_read_is_not_content(framed):
    runs = specific_runs(framed, GATE)
    assert runs[-1] == ["4821"] and all("according" not in run and "passage" not in run for run in runs)
    assert ground(GATE, framed, TEXT).spans[-1].status == "found"


@pytest.mark.parametrize("question, answer, status, spans", [
    (GATE, "The gate code of the north depot is 4821.", "found", [("4821", "found", ["p. 2"])]),
    (GATE, "The gate code of the north depot is 4822.", "not_found", [("4822", "missing", [])]),
    (GATE, "The gate code of the north depot is 4,821.", "found", [("4821", "found", ["p. 2"])]),
    (ENGINEER, "It is Ingrid Halvorsen's.", "found", [("ingrid halvorsen", "found", ["p. 1"])]),
    (ENGINEER, "It is Ingrid Halvorsen.", "found", [("ingrid halvorsen", "found", ["p. 1"])]),
    (ENGINEER, "It is Halvorsen Ingrid.", "partial", [("halvorsen ingrid", "scattered", [])]),
    ("What is the chief engineer of the north depot?", "It is Ingrid Halvorsen.", "partial",
     [("ingrid halvorsen", "elsewhere", [])]),  # another place's engineer: only half the question is near
    (GATE, "The code is A-17, the \"blue door\".", "partial",  # said of the next sentence's code, not the gate code
     [("blue door", "unbound", []), ("a-17", "unbound", [])]),
    (GATE, "The gate code of the north depot is wheat.", "partial", [("wheat", "elsewhere", [])]),
    ("What is the gate code of the Ardent quarry?", "The gate code of the Ardent quarry is 4821.", "partial",
     [("4821", "found", ["p. 2"])]),
    (GATE, "The gate code of the north depot is stated in the document.", "n/a", []),
    (GATE, "<|im_end|>", "n/a", []),
    (GATE, "The gate code is <|im_end|> 4821<|endoftext|>", "found", [("4821", "found", ["p. 2"])]),
])
def test_each_span_is_found_where_the_document_holds_it(question, answer, status, spans):
    grounding = ground(question, answer, TEXT)
    assert grounding.status == status
    assert [(s.text, s.status, s.places) for s in grounding.spans] == spans
    assert grounding.grounded == (status in ("found", "n/a"))


NEIGHBOURS = DocumentText([("The parking bay of the fern orchard is 1234. The parking bay of the fern nursery is 6026. "
                            "The key point will pass unnoticed. Worse is Better, they say.\n\nThe pass key is 85977! "
                            "Remember it.")], ["p. 1"])


@pytest.mark.parametrize("text, question, answer, status, stated", [
    (TEXT, GATE, "The gate code of the north depot is 4821.", "found", True),
    (TEXT, GATE, "The code is A-17, the \"blue door\".", "partial", False),  # the sentence after the gate code's
    (TEXT, ENGINEER, "It is Ingrid Halvorsen.", "found", True),
    (NEIGHBOURS, "What is the parking bay of the fern nursery?", "It is 6026.", "found", True),
    (NEIGHBOURS, "What is the parking bay of the fern nursery?", "It is 1234.", "partial", False),  # the orchard's
    (NEIGHBOURS, "What is the pass key?", "The pass key is 85977.", "found", True),
    (NEIGHBOURS, "What is the pass key?", 'The pass key is "Worse is Better".', "partial", False),
    (NEIGHBOURS, "Which is it?", "It is 6026.", "found", False),  # a question that names nothing
    (TEXT, GATE, "The gate code of the north depot is 4822.", "not_found", False),
])
def test_a_found_answer_is_stated_where_one_sentence_names_it_with_all_the_question_names(
        text, question, answer, status, stated):
    grounding = ground(question, answer, text)
    assert (grounding.status, grounding.stated) == (status, stated)


def test_an_answer_cut_by_the_token_limit_is_not_judged_by_its_broken_last_word():
    answer = "The gate code of the north depot is 4821.\n\nThe gate code of the north depot is 48"
    assert ground(GATE, answer, TEXT).status == "not_found"
    assert ground(GATE, answer, TEXT, cut=True).status == "found"
    finished = "The gate code of the north depot is 4821."  # the limit fell right after a whole sentence
    assert ground(GATE, finished, TEXT, cut=True).spans[0].text == "4821"


def test_a_question_about_what_the_document_never_names_is_not_grounded():
    grounding = ground("What is the gate code of the Ardent quarry?", "It is 4821.", TEXT)
    assert grounding.unnamed == ["ardent", "quarry"] and grounding.missing() == ["ardent", "quarry"]


@pytest.fixture(scope="module")
def embedded():
    return load_session(device="cpu")


def test_a_pdf_answer_is_found_on_its_page_and_that_page_is_cited_first(embedded, tmp_path):
    pages = [FILLER * 12, FILLER * 6 + "The gate code of the north depot is 4821. " + FILLER * 6, FILLER * 12]
    result = embedded.ask(str(text_pdf(tmp_path / "doc.pdf", pages)), GATE)
    assert result.answer == "The gate code of the north depot is 4821."
    assert result.to_json()["grounding"] == {"status": "found", "withheld": None, "restated_from": None,
                                             "answerable": None, "question_words_not_in_document": [],
                                             "spans": [{"text": "4821", "status": "found", "places": ["p. 2"]}]}
    assert result.sources[0].label() == "p. 2" and result.sources[0].holds_answer
    assert not any(s.holds_answer for s in result.sources[1:])


def test_strict_withholds_an_invented_value_and_exits_with_4(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(FILLER * 40 + "The gate code of the north depot is 4821. " + FILLER * 40)
    absent = runner.invoke(app, ["ask", str(path), "What is the gate code of the Ardent quarry?", "--json"])
    assert absent.exit_code == 4, absent.output
    data = json.loads(absent.stdout)
    assert data["answer"] == REFUSAL and data["sources"] == []
    assert data["grounding"]["status"] in ("partial", "not_found") and data["grounding"]["withheld"].startswith("The gate")
    assert data["grounding"]["question_words_not_in_document"] == ["ardent", "quarry"]
    loose = runner.invoke(app, ["ask", str(path), "What is the gate code of the Ardent quarry?", "--no-strict"])
    assert loose.exit_code == 0 and loose.stdout.strip() != REFUSAL
    assert "not in the document as written" in loose.stderr
    out_of_form = runner.invoke(app, ["ask", str(path), "Summarise the document.", "--quiet"])
    assert out_of_form.exit_code == 4 and out_of_form.stdout.strip() == REFUSAL
    found = runner.invoke(app, ["ask", str(path), GATE, "--quiet"])
    assert found.exit_code == 0 and found.stdout.strip() == "The gate code of the north depot is 4821."


def tensor_offsets(path, name: str) -> tuple[int, int]:
    """Where tensor `name`'s bytes lie in a safetensors file."""
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    begin, end = json.loads(data[8:8 + length])[name]["data_offsets"]
    return 8 + length + begin, 8 + length + end


def test_a_saved_context_is_checked_from_its_text_and_refuses_a_tampered_one(embedded, tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(FILLER * 40 + "The gate code of the north depot is 4821. " + FILLER * 40)
    saved = tmp_path / "doc.locret"
    save_reading(embedded.read(str(path)), saved, embedded.heads)
    loaded = embedded.open(str(saved)).ask(GATE)
    assert loaded.grounding.verdict.status == "found" and loaded.grounding.verdict.spans[0].places == ["line 1"]
    begin, _ = tensor_offsets(saved, "document.ids")
    data = bytearray(saved.read_bytes())
    data[begin] ^= 0x01
    (tmp_path / "tampered.locret").write_bytes(bytes(data))
    with pytest.raises(LocretError, match="is corrupted: its tensors do not match the checksum") as caught:
        embedded.open(str(tmp_path / "tampered.locret"))
    assert "\n" not in str(caught.value)


def test_refuse_unfound_keeps_an_answer_whose_words_the_document_holds(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(FILLER * 40 + "The gate code of the north depot is 4821. " + FILLER * 40)
    kept = runner.invoke(app, ["ask", str(path), "What is the gate code of the Ardent quarry?", "--no-strict",
                               "--refuse-unfound", "--json"])
    assert kept.exit_code == 0, kept.output
    data = json.loads(kept.stdout)
    assert data["answer"] != REFUSAL and data["grounding"]["status"] == "partial"
    assert data["grounding"]["withheld"] is None and data["refuse_unfound"] is True


def test_a_name_the_document_writes_inside_a_dotted_one_occurs():
    text = DocumentText(["A wrong password raises pypdf.errors.WrongPasswordError at once. See lzw/PDFsharp too."],
                        ["p. 1"])
    for answer in ("It raises WrongPasswordError.", "PDFsharp."):
        assert ground("What does a wrong password raise?", answer, text).status != "not_found"
    assert ground("What does a wrong password raise?", "It raises BadKeyError.", text).status == "not_found"
    assert ground("What is it?", "It is 3.", DocumentText(["Version 3.14 is out."], ["p. 1"])).status == "not_found"
