"""Hostile files besides documents, through `locret ask`: a `.locret` file's header, heads (ours and the official
format), a reader and a GGUF model, each damaged by hand. Every one exits with status 1 and one `error:` line naming
the file and what is wrong, and leaves every file as it was."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch
from helpers.gguf_files import write_gguf
from helpers.hostile_files import (
    ANSWER,
    ARCHITECTURE,
    ARRAY,
    QUESTION,
    STRING,
    UINT32,
    gguf_file,
    gguf_pair,
    gguf_text,
    locret_header,
    needs_gguf,
    nested_arrays,
    saved_depot,
    signed,
    snapshot,
    tensor_entry,
    with_header,
)
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from locret_cli.cli import app
from locret_cli.core.answer.reader import ReaderAdapter
from locret_cli.models.embedded import EMBEDDED_DIR
from locret_cli.models.reader_files import save_reader

runner = CliRunner()
ASK = ["-q", "--max-new-tokens", "16"]


@pytest.fixture(scope="module")
def saved(embedded_session, tmp_path_factory) -> Path:
    return saved_depot(embedded_session, tmp_path_factory.mktemp("saved"))


@pytest.fixture
def document(tmp_path) -> Path:
    path = tmp_path / "depot.txt"
    path.write_text(f"{ANSWER}\n" * 3)
    return path


def refused(args: list[str], folder: Path, says: str) -> None:
    """`locret` with `args` exits 1 with one `error:` line holding `says`, and every file under `folder` is kept."""
    before = snapshot(folder)
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert says in result.stderr, result.stderr
    assert snapshot(folder) == before


def test_the_saved_context_itself_answers(saved):
    result = runner.invoke(app, ["ask", str(saved), QUESTION, *ASK])
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n"


def settings_edit(name, value):
    return lambda h: {**h, "settings": {**h["settings"], name: value}}


@pytest.mark.parametrize("change, sign, says", [
    (settings_edit("budget", -1), False, "is corrupted: its header does not match the checksum written with it"),
    (lambda h: {**h, "policy": "streaming"}, False, "is corrupted: its header does not match the checksum"),
    (settings_edit("budget", -1), True, "is not a valid .locret file: its settings: budget must be positive, got -1"),
    (settings_edit("stabilizers", 64), True, "its stabilizers (64) do not fit in its budget (64)"),
    (settings_edit("kv_bits", 16.0), True, 'settings.kv_bits must be a whole number, got 16.0'),
    (lambda h: {**{k: v for k, v in h.items() if k != "engine"}, "engin": h["engine"]}, True, ": engine is missing"),
    (lambda h: {**h, "document": {**h["document"], "nam": "x"}}, True, "document.nam is not a field locret writes"),
    (lambda h: {**h, "engine": {**h["engine"], "seen": "589"}}, True,
     'engine.seen must be a whole number of at least 0, got "589"'),
    (lambda h: {**h, "engine": {**h["engine"], "kept_tokens": 10 ** 6}}, True, "its counts disagree"),
    (lambda h: {**h, "prefix_ids": [-1]}, True, "prefix_ids[0] must be a whole number of at least 0, got -1"),
    (lambda h: {**h, "prefix_ids": [10 ** 9]}, True, "its prompt ids pass its tokenizer's vocabulary"),
    (lambda h: {**h, "settings": {**h["settings"], "policy": "oracle"}}, True,
     "its settings: policy must be locret, streaming"),
    (lambda h: {**h, "model": [h["model"]]}, True, "model must be an object, got [{"),
    (lambda h: {**h, "version": 1}, True, "in context format 1; this locret (0.1.0) reads format 3: read the document"),
])
def test_an_edited_header_is_refused_with_its_digest_or_by_its_fields(saved, tmp_path, change, sign, says):
    header = json.loads(locret_header(saved))
    edited = with_header(saved, tmp_path / "edited.locret", signed(change(header)) if sign else
                         json.dumps(change(header)))
    refused(["ask", str(edited), QUESTION, *ASK], tmp_path, says)


@pytest.mark.parametrize("text, says", [
    ("[1, 2]", "is not a locret saved context"),
    ('"locret-context"', "is not a locret saved context"),
    ("{'format': 1}", "is not a readable .locret file (truncated or corrupted: JSONDecodeError)"),
    ("[" * 100_000 + "]" * 100_000, "is not a readable .locret file (truncated or corrupted: RecursionError)"),
])
def test_a_header_that_is_not_a_json_object_is_refused(saved, tmp_path, text, says):
    refused(["ask", str(with_header(saved, tmp_path / "bad.locret", text)), QUESTION, *ASK], tmp_path, says)


def test_edited_tensors_are_refused_by_their_digest(saved, tmp_path):
    data = bytearray(saved.read_bytes())
    data[-7] ^= 0x40
    (tmp_path / "flipped.locret").write_bytes(bytes(data))
    refused(["ask", str(tmp_path / "flipped.locret"), QUESTION, *ASK], tmp_path,
            "is corrupted: its tensors do not match the checksum written with them")


@pytest.fixture
def heads(tmp_path) -> Path:
    """A copy of the embedded model's heads, to damage."""
    return Path(shutil.copytree(EMBEDDED_DIR / "heads", tmp_path / "heads"))


def edit_json(name: str, change):
    def edit(folder: Path) -> None:
        config = folder / name
        config.write_text(json.dumps(change(json.loads(config.read_text()))))
    return edit


def edit_tensors(name: str, change):
    def edit(folder: Path) -> None:
        save_file(change(load_file(folder / name)), str(folder / name))
    return edit


def edit_config(change):
    return edit_json("heads.json", change)


def edit_weights(change):
    return edit_tensors("heads.safetensors", change)


def write(name: str, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def truncated(name: str):
    return lambda folder: (folder / name).write_bytes((folder / name).read_bytes()[:1000])


@pytest.mark.parametrize("damage, says", [
    (write("heads.json", b"{not json"), "heads.json is not valid JSON: Expecting property name"),
    (write("heads.json", b"\xff\xfe{}"), "heads.json is not valid JSON: it is not UTF-8 text"),
    (write("heads.json", b"[1, 2]"), "heads.json is not a valid locret heads config: the file must be an object"),
    (edit_config(lambda c: {k: v for k, v in c.items() if k != "hidden"}), "config: hidden is missing"),
    (edit_config(lambda c: {**c, "hidden": "256"}), 'hidden must be a whole number of at least 1, got "256"'),
    (edit_config(lambda c: {**c, "hidden": -3}), "hidden must be a whole number of at least 1, got -3"),
    (edit_config(lambda c: {**c, "hidden": 10 ** 12}), "layers.0.fc1.weight is [256, 512], where [1000000000000, 512]"),
    (edit_config(lambda c: {**c, "model_shape": {**c["model_shape"], "layers": 5}}),
     "were trained for another model shape: layers 5 (model has 4)"),
    (edit_config(lambda c: {**c, "model_shape": {**c["model_shape"], "heads": [4]}}),
     "model_shape.heads must be a whole number of at least 1, got [4]"),
    (edit_config(lambda c: {**c, "activation": "sigh"}), 'activation "sigh" is not an activation transformers has'),
    (edit_config(lambda c: {**c, "version": 2}), "version must be 1, got 2"),
    (edit_config(lambda c: {**c, "model_identity": {**c["model_identity"], "weight_samples": {"w": [0.5]}}}),
     "model_identity.weight_samples.w must be a list of 1024 items"),
    (edit_weights(lambda t: {k: v for k, v in t.items() if k != "layers.3.fc2.bias"}),
     "are incomplete: missing ['layers.3.fc2.bias'], unexpected []"),
    (edit_weights(lambda t: {**t, "layers.1.fc2.weight": t["layers.1.fc2.weight"][:, :8].contiguous()}),
     "do not fit this model: layers.1.fc2.weight is [2, 8], where [2, 256] is needed"),
    (edit_weights(lambda t: {**t, "layers.0.fc2.bias": torch.zeros(2, dtype=torch.int64)}),
     "layers.0.fc2.bias holds torch.int64, not floating-point numbers"),
    (truncated("heads.safetensors"), "heads.safetensors is not a readable safetensors file (truncated or corrupted"),
    (write("heads.safetensors", b"garbage" * 100), "heads.safetensors is not a readable safetensors file"),
    (lambda folder: (folder / "heads.safetensors").unlink(), "heads.safetensors is missing"),
])
def test_damaged_heads_are_refused_in_one_line(document, heads, damage, says):
    damage(heads)
    refused(["ask", str(document), QUESTION, "--heads", str(heads), *ASK], document.parent, says)


def official(folder: Path, state) -> Path:
    """The embedded heads in the official checkpoints' names, passed through `state`, as one safetensors file."""
    heads = load_file(EMBEDDED_DIR / "heads" / "heads.safetensors")
    renamed = {f"model.layers.{k.split('.')[1]}.self_attn.{'.'.join(k.split('.')[2:])}": v for k, v in heads.items()}
    path = folder / "locret.safetensors"
    save_file(state(renamed), str(path))
    return path


@pytest.mark.parametrize("state, says", [
    (lambda s: {k: v for k, v in s.items() if "layers.2.self_attn.fc1.weight" not in k},
     "are incomplete: missing ['layers.2.fc1.weight']"),
    (lambda s: {**s, "model.layers.1.self_attn.fc1.weight": torch.zeros(7, 512)},
     "layers.1.fc1.weight is [7, 512], where [256, 512] is needed"),
    (lambda s: {**s, "model.layers.0.self_attn.fc1.weight": torch.zeros(512)}, "layers.0.fc1.weight matrix"),
])
def test_damaged_official_heads_are_refused_in_one_line(document, state, says):
    path = official(document.parent, state)
    refused(["ask", str(document), QUESTION, "--heads", str(path), *ASK], document.parent, says)


@pytest.mark.parametrize("write_bin, says", [
    (lambda path: torch.save([torch.zeros(2)], path), "heads.bin holds a list, not weights by name"),
    (lambda path: torch.save({"model.layers.0.self_attn.fc1.weight": torch.zeros(1), "x": object()}, path),
     "cannot read {path} as a weights-only checkpoint: it holds more than weights"),
    (lambda path: path.write_bytes(b"garbage" * 10), "cannot read {path} as a weights-only checkpoint: mmap can"),
])
def test_an_official_checkpoint_that_is_not_weights_by_name_is_refused(document, write_bin, says):
    path = document.parent / "heads.bin"
    write_bin(path)
    refused(["ask", str(document), QUESTION, "--heads", str(path), *ASK], document.parent, says.format(path=path))


def test_a_truncated_official_checkpoint_is_refused(document):
    path = official(document.parent, lambda s: s)
    path.write_bytes(path.read_bytes()[:-100])
    refused(["ask", str(document), QUESTION, "--heads", str(path), *ASK], document.parent,
            "locret.safetensors is not a readable safetensors file")


@pytest.fixture
def reader(embedded_session, tmp_path) -> Path:
    """A fresh reader for the embedded model, to damage."""
    model = embedded_session.loaded.model
    save_reader(ReaderAdapter.for_model(model, rank=2), tmp_path / "reader", model, {"model": "embedded"})
    return tmp_path / "reader"


def edit_reader(change):
    return edit_json("reader.json", change)


def edit_factors(change):
    return edit_tensors("reader.safetensors", change)


@pytest.mark.parametrize("damage, says", [
    (write("reader.json", b'{"format": "locret-reader",'), "reader.json is not valid JSON"),
    (write("reader.json", b"null"), "reader.json is not a valid locret reader config: the file must be an object"),
    (edit_reader(lambda c: {**c, "rank": "2"}), 'rank must be a whole number of at least 1, got "2"'),
    (edit_reader(lambda c: {**c, "rank": 0}), "rank must be a whole number of at least 1, got 0"),
    (edit_reader(lambda c: {**c, "alpha": None}), "alpha must be a finite number, got null"),
    (edit_reader(lambda c: {k: v for k, v in c.items() if k != "model_identity"}), "model_identity is missing"),
    (edit_reader(lambda c: {**c, "model": "another\nmodel", "model_identity": {
        **c["model_identity"], "shape": {**c["model_identity"]["shape"], "layers": 9}}}),
     "was trained for another model, not this model"),
    (edit_reader(lambda c: {**c, "rank": 3}),
     "down_proj.lora_A is torch.float32 [2, 704], where float [3, 704] is needed"),
    (edit_factors(lambda t: {k: v for k, v in t.items() if k != "model.layers.1.mlp.up_proj.lora_B"}),
     "'model.layers.1.mlp.up_proj.lora_B' is missing"),
    (edit_factors(lambda t: {**t, "model.layers.9.mlp.up_proj.lora_A": torch.zeros(2, 256),
                             "model.layers.9.mlp.up_proj.lora_B": torch.zeros(256, 2)}),
     "the model has no linear 'model.layers.9.mlp.up_proj' to adapt"),
    (truncated("reader.safetensors"), "reader.safetensors is not a readable safetensors file"),
])
def test_a_damaged_reader_is_refused_in_one_line(document, reader, damage, says):
    damage(reader)
    refused(["ask", str(document), QUESTION, "--reader", str(reader), *ASK], document.parent, says)


def test_the_reader_before_damage_answers(document, reader):
    result = runner.invoke(app, ["ask", str(document), QUESTION, "--reader", str(reader), *ASK])
    assert result.exit_code == 0, result.output


@needs_gguf
@pytest.mark.parametrize("name, data, says", [
    ("huge-string", gguf_file(gguf_pair("general.name", STRING, struct.pack("<Q", 1 << 62)), ARCHITECTURE,
                              padding=64), "the header ends inside a string"),
    ("huge-string-later", gguf_file(ARCHITECTURE, gguf_pair("general.name", STRING, struct.pack("<Q", 1 << 62)),
                                    padding=64), "the header ends inside a string"),
    ("deep-arrays", gguf_file(gguf_pair("x", ARRAY, nested_arrays(5000)), ARCHITECTURE),
     "arrays nested more than 8 deep"),
    ("deep-arrays-later", gguf_file(ARCHITECTURE, gguf_pair("x", ARRAY, nested_arrays(5000))),
     "arrays nested more than 8 deep"),
    ("huge-array", gguf_file(ARCHITECTURE, gguf_pair("x", ARRAY, struct.pack("<IQ", STRING, 1 << 60)), padding=64),
     "an array of 1,152,921,504,606,846,976 items runs past the end of the file"),
    ("many-pairs", b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40) + ARCHITECTURE,
     "it claims 1,099,511,627,776 key-value pairs, more than its"),
    ("many-tensors", gguf_file(ARCHITECTURE, tensors=1 << 40, padding=64), "it claims 1,099,511,627,776 tensors"),
    ("five-dims", gguf_file(ARCHITECTURE, tensors=1) + tensor_entry(b"t", [1, 1, 1, 1, 1]),
     "tensor 't' has 5 dimensions; GGUF allows 4"),
    ("past-the-end", gguf_file(ARCHITECTURE, tensors=1) + tensor_entry(b"t", [1 << 30, 1 << 30]),
     "tensor 't': its data runs past the end of the file"),
    ("alignment", gguf_file(ARCHITECTURE, gguf_pair("general.alignment", UINT32, struct.pack("<I", 3))),
     "general.alignment is not a power of two held in a uint32"),
    ("twice", gguf_file(ARCHITECTURE, ARCHITECTURE), "the key 'general.architecture' appears twice"),
    ("version", b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "GGUF version 1; locret reads versions 2 and 3"),
])
def test_a_hostile_gguf_header_is_refused_in_one_line(document, name, data, says):
    path = document.parent / f"{name}.gguf"
    path.write_bytes(data)
    refused(["ask", str(document), QUESTION, "--model", str(path), "--policy", "streaming", "--device", "cpu", *ASK],
            document.parent, says)


@needs_gguf
def test_a_gguf_file_cut_short_or_with_sizes_its_tensors_disagree_with_is_refused(document):
    path = document.parent / "tiny.gguf"
    write_gguf(path)
    whole = path.read_bytes()
    path.write_bytes(whole[:-64])
    model = ["--model", str(path), "--policy", "streaming", "--device", "cpu"]
    refused(["ask", str(document), QUESTION, *model, *ASK], document.parent, "its data runs past the end of the file")
    key = gguf_text(b"llama.embedding_length") + struct.pack("<I", UINT32)
    at = whole.index(key) + len(key)
    path.write_bytes(whole[:at] + struct.pack("<I", 32) + whole[at + 4:])
    refused(["ask", str(document), QUESTION, *model, *ASK], document.parent,
            "tiny.gguf holds a model transformers cannot load: RuntimeError")


@pytest.mark.parametrize("depth", [900, 960, 990, 998, 5000])
def test_json_nested_about_as_deep_as_python_parses_is_refused_in_one_line(saved, heads, document, depth):
    """Python's json reads nesting up to its recursion limit; the checks that follow, deeper in the stack, must not
    fail where reading did not."""
    nested = "[" * depth + "]" * depth
    edited = with_header(saved, document.parent / "deep.locret",
                         '{"format": "locret-context", "version": 2, "x": %s}' % nested)
    refused(["ask", str(edited), QUESTION, *ASK], document.parent, "deep.locret")
    config = json.loads((heads / "heads.json").read_text())
    (heads / "heads.json").write_text(json.dumps({**config, "hidden": "?"}).replace('"?"', nested))
    refused(["ask", str(document), QUESTION, "--heads", str(heads), *ASK], document.parent, "heads.json")
