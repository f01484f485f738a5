"""Read once, ask many: `Session.read` -> `Reading.ask`, forks that share tensors, origins and citations."""

from __future__ import annotations

import random

import pytest
import torch
from helpers.documents import GATE, filler_lines
from helpers.pdfs import text_pdf

from locret_cli.api import load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.bench.synthetic import passkey_fact
from locret_cli.errors import LocretError
from locret_cli.inputs.documents import text_document
from locret_cli.inputs.sources import SourceMap
from locret_cli.settings import AnswerSettings, ReadSettings

QUESTIONS = ["What is the gate code of the north depot?", "What is the pass key?", "Who?"]


@pytest.fixture(scope="module")
def session():
    return load_session(device="cpu")


def passkey_pdf(path, pages: int, at_page: int, seed: int = 0) -> tuple[str, str]:
    """A PDF of `pages` pages of filler, 45 lines each, with a pass key on page `at_page`. Returns (path, key)."""
    rng = random.Random(seed)
    fact = passkey_fact(rng)
    texts = []
    for page in range(1, pages + 1):
        lines = filler_lines(rng, 45)
        if page == at_page:
            lines.insert(20, fact.statement)
        texts.append("\n".join(lines))
    return str(text_pdf(path, texts)), fact.answer


def test_several_questions_from_one_read_answer_like_separate_runs(session, tmp_path):
    path = tmp_path / "doc.txt"
    rng = random.Random(1)
    path.write_text("\n".join(filler_lines(rng, 200) + [GATE, "The pass key is 51234. Remember it."]
                              + filler_lines(rng, 200)))
    reading = session.read(str(path))
    together = [reading.ask(q).answer for q in QUESTIONS]
    separate = [session.ask(str(path), q).answer for q in QUESTIONS]
    assert together == separate
    assert together[0] == GATE and together[1] == "The pass key is 51234."


def test_forks_share_the_readers_tensors_and_never_change_them(session, tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("\n".join(filler_lines(random.Random(2), 300)))
    reading = session.read(str(path))
    before = [{k: (t.data_ptr(), t.clone()) for k, t in layer.tensors().items()} for layer in reading.engine.cache.layers]
    fork = reading.engine.fork()
    assert all(t.data_ptr() == before[i][k][0] for i, layer in enumerate(fork.cache.layers)
               for k, t in layer.tensors().items())
    reading.ask("What is the pass key?")
    fork.answer([5, 6, 7])
    for i, layer in enumerate(reading.engine.cache.layers):
        for name, tensor in layer.tensors().items():
            assert tensor.data_ptr() == before[i][name][0] and torch.equal(tensor, before[i][name][1]), name


def test_origins_are_token_indices_through_eviction(session, tmp_path):
    """Under original positions a key's position is its token index: origins must equal positions after every
    eviction, and stay unique and ascending per head."""
    path = tmp_path / "doc.txt"
    path.write_text("\n".join(filler_lines(random.Random(3), 400)))
    settings = session.plan(read={"positions": "original"}).read
    reading = session.read(str(path), settings)
    assert reading.engine.document_tokens > 3 * settings.budget
    for layer in reading.engine.cache.layers:
        assert layer.origins.dtype == torch.int32
        assert torch.equal(layer.origins, layer.positions)
        assert bool((layer.origins.diff(dim=-1) > 0).all())


@pytest.mark.parametrize("at_page", [2, 7, 11])
def test_the_page_holding_the_pass_key_is_cited_first(session, tmp_path, at_page):
    path, key = passkey_pdf(tmp_path / "book.pdf", 12, at_page)
    result = session.ask(path, "What is the pass key?")
    assert result.document.tokens > 4 * result.settings.budget  # most of the book was evicted
    assert result.answer == f"The pass key is {key}."
    assert result.sources[0].page == at_page
    assert sum(s.weight for s in result.sources) <= 1.0 + 1e-9


def test_the_line_holding_a_fact_is_cited_first_in_text(session, tmp_path):
    rng = random.Random(4)
    lines = filler_lines(rng, 300) + ["", GATE, ""] + filler_lines(rng, 300)
    path = tmp_path / "doc.txt"
    path.write_text("\n".join(lines))
    result = session.ask(str(path), "What is the gate code of the north depot?")
    assert result.answer == GATE
    assert (result.sources[0].first_line, result.sources[0].last_line) == (302, 302)
    assert result.sources[0].label() == "line 302"


def test_sources_do_not_change_the_answer_and_can_be_skipped(session, tmp_path):
    path, _ = passkey_pdf(tmp_path / "book.pdf", 6, 3)
    reading = session.read(path)
    cited, plain = reading.ask("What is the pass key?"), reading.ask("What is the pass key?", sources=0)
    assert cited.answer == plain.answer and plain.sources is None and cited.sources


def test_an_answer_that_the_document_is_silent_cites_nothing(session, tmp_path):
    path, _ = passkey_pdf(tmp_path / "book.pdf", 6, 3)
    reading = session.read(path)
    answer = reading.ask("What is the pass key?").answer
    class Silent:  # as if this answer said the document were silent
        def warning(self, question):
            return None

        def says_not_stated(self, said):
            return said == answer

        def restated(self, question, said):
            return None

    reading.question_forms = Silent()
    silent = reading.ask("What is the pass key?")
    assert silent.answer == answer and silent.sources == []
    assert reading.ask("What is the pass key?", sources=0).sources is None


def test_reading_settings_are_fixed_once_read(session, tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(GATE)
    reading = session.read(str(path))
    save_reading(reading, tmp_path / "doc.locret")
    changed = ReadSettings(**{**vars(reading.settings), "budget": reading.settings.budget + 1})
    with pytest.raises(LocretError, match="^budget is fixed when the document is read"):
        session.open(str(tmp_path / "doc.locret"), changed)
    with pytest.raises(LocretError, match="^budget is fixed when the document is read"):
        session.open(str(tmp_path / "doc.locret"), {"budget": reading.settings.budget + 1})
    assert session.open(str(tmp_path / "doc.locret"), {"budget": reading.settings.budget}).settings == reading.settings
    shorter = AnswerSettings(max_new_tokens=3)
    assert len(reading.ask("What is the gate code of the north depot?", shorter).answer.split()) <= 3


def test_paragraph_map_is_the_same_however_the_text_is_cut():
    text = "\n".join(["Title", "", "one", "two", "  ", "three"] + [f"long {i}" for i in range(45)] + ["", "end"])
    offsets = list(range(len(text)))  # one token per character
    whole = SourceMap("lines")
    whole.add_text(0, text, offsets)
    pieces = SourceMap("lines")
    for start in range(0, len(text), 7):
        piece = text[start:start + 7]
        pieces.add_text(start, piece, list(range(len(piece))))
    assert (whole.starts, whole.first, whole.last) == (pieces.starts, pieces.first, pieces.last)
    assert list(zip(whole.first, whole.last)) == [(1, 1), (3, 4), (6, 45), (46, 51), (53, 53)]
    assert whole.labels()[:2] == ["line 1", "lines 3-4"]
    assert whole.unit_of(torch.tensor([0, 5, len(text) - 1])).tolist() == [0, 0, 4]


def test_a_read_past_the_models_positions_warns_unless_compact_positions_keep_it_within_them(session):
    trained = session.loaded.model.config.max_position_embeddings
    text = "The gate code is 4821. " + "Words go by here. " * (trained // 3)
    small = {"budget": 256, "chunk_size": 128, "stabilizers": 32}
    full = load_session().read(text_document(text), ReadSettings(**small, policy="full"))
    assert full.document.tokens > trained
    assert any(f"pass the {trained:,} positions" in w for w in full.warnings)
    bounded = session.read(text_document(text), ReadSettings(**small))
    assert not any("positions this model was trained on" in w for w in bounded.warnings)
