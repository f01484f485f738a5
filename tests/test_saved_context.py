"""`.locret` files: a bit-identical round trip, the same answers, and one-line refusals for every bad file."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from helpers.models import tiny_model

from locret_cli.api import Session, load_session
from locret_cli.api.saved_context import LAYER_TENSORS, VERSION, load_reading, save_reading
from locret_cli.core.heads import RetainingHeads, compute_dtype
from locret_cli.errors import LocretError
from locret_cli.models.loading import LoadedModel

QUESTION = "What is the gate code of the north depot?"


@pytest.fixture(scope="module")
def session():
    return load_session(device="cpu")


@pytest.fixture(scope="module")
def saved(session, tmp_path_factory):
    """(reading, path): the handbook's first 60,000 characters, read and saved."""
    folder = tmp_path_factory.mktemp("saved")
    document = folder / "part.txt"
    document.write_text(open("samples/handbook.txt").read()[:60_000])
    reading = session.read(str(document))
    path = folder / "part.locret"
    save_reading(reading, path, session.heads)
    return reading, path


def test_round_trip_is_bit_identical_and_answers_alike(session, saved):
    reading, path = saved
    loaded = session.open(str(path))
    for original, restored in zip(reading.engine.cache.layers, loaded.engine.cache.layers):
        for name in LAYER_TENSORS:
            a, b = getattr(original, name), getattr(restored, name)
            assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.equal(reading.engine.cache.frequencies, loaded.engine.cache.frequencies)
    assert loaded.source_map == reading.source_map and loaded.document == reading.document
    for question in (QUESTION, "What is the pass key?"):
        direct, again = reading.ask(question), loaded.ask(question)
        assert direct.answer == again.answer and direct.sources == again.sources
    assert direct is not None and reading.ask(QUESTION).answer == "The gate code of the north depot is 4821."
    assert loaded.loaded_from == str(path)


def test_file_size_is_the_kept_entries_and_little_more(session, saved):
    reading, path = saved
    info = save_reading(reading, path.with_name("again.locret"), session.heads)
    cache = reading.engine.cache
    saved_bytes = sum(getattr(layer, name).nbytes for layer in cache.layers for name in LAYER_TENSORS)
    assert saved_bytes < cache.nbytes()  # the unrotated keys are not saved: loaded keys that move get them again
    tensor_bytes = saved_bytes + cache.frequencies.numel() * 4
    assert tensor_bytes < info.size_bytes < tensor_bytes + 64 * 1024
    assert info.entries == reading.engine.kept_tokens == reading.settings.budget


def test_existing_output_is_kept_unless_forced(session, saved):
    reading, path = saved
    before = path.read_bytes()
    with pytest.raises(LocretError, match="already exists"):
        save_reading(reading, path, session.heads)
    assert path.read_bytes() == before
    with pytest.raises(LocretError, match="must end in .locret"):
        save_reading(reading, path.with_suffix(".bin"), session.heads)


def rewrite_header(source, target, change) -> None:
    """Copy a safetensors file, passing its "locret" metadata JSON through `change`."""
    data = source.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    header["__metadata__"]["locret"] = json.dumps(change(json.loads(header["__metadata__"]["locret"])))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    target.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


def test_bad_files_are_refused_in_one_line(session, saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    (tmp_path / "truncated.locret").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[-100] ^= 0xFF
    (tmp_path / "flipped.locret").write_bytes(bytes(flipped))
    (tmp_path / "text.locret").write_text("not a context at all")
    rewrite_header(path, tmp_path / "future.locret", lambda h: {**h, "version": VERSION + 1, "locret": "9.0"})
    rewrite_header(path, tmp_path / "other.locret", lambda h: {**h, "format": "something-else"})
    cases = {
        "truncated.locret": "not a readable .locret file",
        "flipped.locret": "is corrupted",
        "text.locret": "not a readable .locret file",
        "future.locret": f"written by locret 9.0 in context format {VERSION + 1}",
        "other.locret": "not a locret saved context",
        "missing.locret": "no such file",
    }
    for name, message in cases.items():
        with pytest.raises(LocretError, match=message) as caught:
            session.open(str(tmp_path / name))
        assert "\n" not in str(caught.value)


def test_another_model_dtype_or_heads_is_refused(session, saved):
    _, path = saved
    model = session.loaded.model
    other = tiny_model("llama")
    with pytest.raises(LocretError, match="read by another model"):
        load_reading(path, Session(LoadedModel(other, session.loaded.tokenizer, "tiny", {}), None),
                     session.plan(source=str(path)))
    read_in, other_dtype = ("bf16", "fp32") if compute_dtype(model) == torch.bfloat16 else ("fp32", "bf16")  # this CPU's
    with pytest.raises(LocretError, match=f"pass dtype {read_in}$"):
        load_session(device="cpu", dtype=other_dtype).open(str(path))
    torch.manual_seed(5)
    retrained = RetainingHeads.for_model(model, hidden=session.heads.hidden).eval()
    stranger = Session(LoadedModel(model, session.loaded.tokenizer, "embedded", {}), retrained)
    with pytest.raises(LocretError, match="other retaining heads"):
        stranger.open(str(path))
    headless = Session(LoadedModel(model, session.loaded.tokenizer, "embedded", {}), None)
    assert headless.open(str(path)).ask(QUESTION).answer == "The gate code of the north depot is 4821."
