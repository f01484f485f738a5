"""A GGUF file's converted copy: written on the first load, read on later ones, keyed by the file's bytes and the
dtype, and never half-written."""

from __future__ import annotations

import pytest
import torch
from helpers.gguf_files import tiny_llama, write_gguf

from locret_cli.models import gguf, gguf_cache
from locret_cli.models.loading import load_model


@pytest.fixture
def copies(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("LOCRET_CACHE_DIR", str(root))
    return root / "gguf"


def logits(loaded, ids=(5, 6, 7, 8)):
    with torch.no_grad():
        return loaded.model(torch.tensor([list(ids)])).logits


def test_the_first_load_writes_a_copy_and_the_next_reads_it_without_the_file(tmp_path, copies, monkeypatch):
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    first = load_model(str(path), device="cpu", dtype="fp32")
    [folder] = copies.iterdir()
    assert (folder / gguf_cache.COMPLETE).is_file() and folder.name.endswith("-float32")
    monkeypatch.setattr(gguf, "load", lambda *args: pytest.fail("the GGUF file was converted again"))
    again = load_model(str(path), device="cpu", dtype="fp32")
    assert torch.equal(logits(first), logits(again))
    text = "The gate code of the north depot is 4821."
    assert again.tokenizer.encode(text) == first.tokenizer.encode(text)
    assert again.tokenizer.chat_template == first.tokenizer.chat_template


def test_other_bytes_or_another_dtype_get_their_own_copy_and_a_partial_one_is_made_again(tmp_path, copies):
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    load_model(str(path), device="cpu", dtype="fp32")
    load_model(str(path), device="cpu", dtype="bf16")
    write_gguf(path, tiny_llama(seed=1))
    load_model(str(path), device="cpu", dtype="fp32")
    assert len(list(copies.iterdir())) == 3
    newest = gguf_cache.copy_folder(path, torch.float32)
    (newest / gguf_cache.COMPLETE).unlink()
    reloaded = load_model(str(path), device="cpu", dtype="fp32")
    assert (newest / gguf_cache.COMPLETE).is_file()
    assert torch.equal(logits(reloaded), logits(load_model(str(path), device="cpu", dtype="fp32")))


def test_an_empty_setting_turns_copies_off_and_an_unwritable_folder_only_skips_them(tmp_path, monkeypatch):
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    monkeypatch.setenv("LOCRET_CACHE_DIR", "")
    assert gguf_cache.copy_folder(path, torch.float32) is None
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would go")
    monkeypatch.setenv("LOCRET_CACHE_DIR", str(blocked))
    loaded = load_model(str(path), device="cpu", dtype="fp32")
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("the gate code")) == "the gate code"
    assert blocked.read_text() == "a file where the folder would go"
