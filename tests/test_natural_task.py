"""The natural-questions task: its questions file (counts, kinds, splits), its documents built from the installed
packages (skipped where one is missing), every answer and candidate found in its document, and the document assembly
itself on a small fake package."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from locret_cli.bench import natural
from locret_cli.bench.natural import NaturalDocument, NaturalQuestion, Source
from locret_cli.errors import SettingError

STATED_AT_DEPTH = ("lookup", "paraphrase", "detail")  # two-place depths are the later place, not the answer's


@pytest.fixture(scope="module")
def questions() -> list[NaturalQuestion]:
    return natural.read_questions()


@pytest.fixture(scope="module")
def documents() -> list[NaturalDocument]:
    try:
        return natural.load()
    except SettingError as exc:
        pytest.skip(f"a source of the natural documents is not installed as written against: {exc}")


@pytest.fixture
def fresh_cache():
    """document_text caches by name: tests that change DOCUMENTS start and leave it empty."""
    natural.document_text.cache_clear()
    yield
    natural.document_text.cache_clear()


def test_the_questions_cover_enough_documents_kinds_and_splits(questions):
    names = {source.name for source in natural.DOCUMENTS}
    assert len(questions) >= 80
    assert {question.document for question in questions} <= names and len(names) >= 5
    kinds = Counter(question.kind for question in questions)
    assert set(kinds) == set(natural.KINDS) and min(kinds.values()) >= 12, kinds
    test_only = {source.name for source in natural.DOCUMENTS if source.test_only}
    for split in natural.SPLITS:
        held = [question for question in questions if question.split == split]
        assert {question.kind for question in held} == set(natural.KINDS), split
        expected = {question.document for question in questions} - (test_only if split == "validation" else set())
        assert {question.document for question in held} == expected, split
    assert len({(question.document, question.question) for question in questions}) == len(questions)


def test_depths_and_not_stated_questions_are_well_formed(questions):
    for question in questions:
        assert 0 <= question.depth <= 1, question
        if question.kind == "not-stated":
            assert question.answer == "" and question.alternatives == () and question.depth == 0.0, question
        else:
            assert question.answer and question.answer == question.answer.strip(), question


def test_every_answer_alternative_and_candidate_is_in_its_document(documents):
    assert [document.name for document in documents] == [source.name for source in natural.DOCUMENTS]
    assert natural.unfound(documents) == []


def test_stated_answers_are_at_their_depth(documents):
    for document in documents:
        for question in document.questions:
            if question.kind not in STATED_AT_DEPTH:
                continue
            values = (question.answer, *question.alternatives)
            patterns = [r"\s+".join(map(re.escape, value.split())) for value in values]
            starts = [match.start() / len(document.text)
                      for pattern in patterns for match in re.finditer(pattern, document.text, re.IGNORECASE)]
            assert any(abs(start - question.depth) < 0.01 for start in starts), (document.name, question.question)


def test_unfound_names_what_a_document_lacks():
    text = "The default refresh rate is 4 times\na second; the other is 12.5."
    good = NaturalQuestion("d", "How often?", "4 times a second", ("4",), ("12.5",), "detail", "test", 0.5)
    missing = NaturalQuestion("d", "What colour?", "red", (), ("blue",), "lookup", "test", 0.1)
    answered = NaturalQuestion("d", "Who?", "4", (), (), "not-stated", "test", 0.0)
    failures = natural.unfound([NaturalDocument("d", text, (good, missing, answered))])
    assert failures == ["d: What colour?: answer 'red' is not in the document",
                        "d: What colour?: candidate 'blue' is not in the document",
                        "d: Who?: a not-stated question has an answer"]


def test_a_missing_or_other_version_source_names_what_to_install(monkeypatch, fresh_cache):
    monkeypatch.setattr(natural, "DOCUMENTS", (Source("absent", "locret-absent-distribution", "1.0", "x", "essays"),
                                               Source("old", "pytest", "0.0.1", "_pytest", "docstrings")))
    with pytest.raises(SettingError, match="pip install --no-deps locret-absent-distribution==1.0$"):
        natural.document_text("absent")
    with pytest.raises(SettingError, match="written against pytest 0.0.1, not .*pytest==0.0.1$"):
        natural.document_text("old")


def test_documents_are_assembled_from_the_installed_files(tmp_path, monkeypatch, fresh_cache):
    site = tmp_path / "site"
    (site / "fakedocs-2.0.dist-info").mkdir(parents=True)
    (site / "fakedocs-2.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedocs\nVersion: 2.0\n")
    (site / "fakedocs" / "sub").mkdir(parents=True)
    (site / "fakedocs" / "__init__.py").write_text('"""Top."""\n\n\ndef f():\n    """F does."""\n\n\nclass C:\n'
                                                   '    """A C."""\n\n    def m(self):\n        """M does."""\n')
    (site / "fakedocs" / "sub" / "mod.py").write_text('def g():\n    pass\n\n\ndef h():\n    """H\n\n    does."""\n')
    for name in ("b.txt", "a.txt", "c.txt"):
        (site / "fakedocs" / name).write_text(f"\n essay {name[0]} \n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(natural, "DOCUMENTS", (Source("api", "fakedocs", "2.0", "fakedocs", "docstrings"),
                                               Source("essays", "fakedocs", "2.0", "fakedocs", "essays", (1, 3))))
    assert natural.document_text("api") == ("fakedocs\n\nTop.\n\nfakedocs.f\n\nF does.\n\nfakedocs.C\n\nA C.\n\n"
                                            "fakedocs.C.m\n\nM does.\n\nfakedocs.sub.mod.h\n\nH\n\ndoes.")
    assert natural.document_text("essays") == "essay b\n\nessay c"
