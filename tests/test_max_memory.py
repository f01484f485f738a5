"""`--max-memory`: weights past the cap stay on disk and are read per layer, with the same logits and answers; caps
that cannot work are refused in one line; `locret convert` writes a GGUF model as safetensors once."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import ask, runner
from helpers.documents import DOCUMENT
from helpers.gguf_files import write_gguf
from helpers.models import save_model_dir, tiny_model

from locret_cli.api import ModelSpec, load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.cli import app
from locret_cli.core.identity import weight_samples
from locret_cli.errors import SettingError
from locret_cli.models.loading import load_model
from locret_cli.runtime.offload import is_offloaded, largest_block_bytes, parse_size
from locret_cli.runtime.packed_linear import PACKED_ATTRIBUTE

pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_model_dir(tiny_model("llama"), tmp_path_factory.mktemp("model") / "llama"))


def cap_for(model_dir: str, layers: int) -> str:
    """A cap that holds the embeddings, the output layer and about `layers` decoder layers, in bytes."""
    model = load_model(model_dir, device="cpu", dtype="fp32").model
    block = largest_block_bytes(model)
    return str(2 * block + layers * sum(p.numel() * 4 for p in model.model.layers[0].parameters()) + 1024)


def test_sizes_parse_in_decimal_and_binary_units_and_bad_ones_are_refused():
    assert parse_size("2GiB") == 2 * 2**30 and parse_size("500MB") == 500 * 10**6 and parse_size("1.5 kib") == 1536
    assert parse_size("4096") == 4096
    for bad in ("lots", "2 parsecs", "-1GB", "0"):
        with pytest.raises(SettingError, match="max_memory"):
            parse_size(bad)


def test_weights_past_the_cap_stay_on_disk_with_the_same_logits(model_dir):
    whole = load_model(model_dir, device="cpu", dtype="fp32").model
    capped = load_model(model_dir, device="cpu", dtype="fp32", max_memory=cap_for(model_dir, 0))
    model = capped.model
    assert is_offloaded(model) and "read from disk" in capped.dtype_reason
    assert model.model.layers[-1].self_attn.v_proj.weight.device.type == "meta"
    ids = torch.randint(2, 200, (1, 40))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, whole(ids).logits)
    assert weight_samples(model) == weight_samples(whole)  # shipped heads find a model whose weights are on disk


def test_a_session_reads_answers_and_saves_alike_and_packs_nothing(model_dir, tmp_path):
    document = tmp_path / "doc.txt"
    document.write_text(DOCUMENT * 3)
    answers = []
    for cap in (None, cap_for(model_dir, 1)):
        session = load_session(model_dir, reads_with="streaming", device="cpu", dtype="fp32", max_memory=cap)
        settings = session.plan(read={"policy": "streaming", "budget": 64, "chunk_size": 32, "stabilizers": 16}).read
        reading = session.read(str(document), settings)
        answering = session.plan(answer={"max_new_tokens": 6}).answer
        result = reading.ask("What is the gate code?", answering)
        answers.append(result.answer)
        if cap is not None:
            assert not any(hasattr(m, PACKED_ATTRIBUTE) for m in session.loaded.model.modules())
            assert save_reading(reading, tmp_path / "doc.locret").size_bytes > 0
            assert session.open(str(tmp_path / "doc.locret")).ask("What is the gate code?", answering).answer == \
                answers[0]
    assert answers[0] == answers[1]


def test_caps_that_cannot_work_are_refused_in_one_line(model_dir, tmp_path):
    with pytest.raises(SettingError, match="cannot hold one layer"):
        load_model(model_dir, device="cpu", dtype="fp32", max_memory="1KiB")
    (tmp_path / "doc.txt").write_text(DOCUMENT)
    with pytest.raises(SettingError, match="does not combine"):
        load_session(ModelSpec(model_dir, device="cpu", max_memory="1GiB", load_8bit=True))
    refused = ask(tmp_path / "doc.txt", "q?", "--max-memory", "1GiB")
    assert refused.exit_code == 1 and "apply to --model" in refused.output and "Traceback" not in refused.output


def test_a_gguf_file_is_refused_with_the_command_that_converts_it(tmp_path):
    pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    write_gguf(path)
    with pytest.raises(SettingError, match="locret convert"):
        load_session(ModelSpec(str(path), device="cpu", max_memory="1GiB"))
    out = tmp_path / "converted"
    result = runner.invoke(app, ["convert", str(path), str(out), "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors").is_file() and f"--model {out}" in result.stdout
    from_file = load_model(str(path), device="cpu", dtype="fp32").model
    capped = load_model(str(out), device="cpu", dtype="fp32", max_memory=cap_for(str(out), 0)).model
    ids = torch.randint(2, 200, (1, 20))
    with torch.no_grad():
        assert torch.allclose(capped(ids).logits, from_file(ids).logits, atol=1e-5)
    again = runner.invoke(app, ["convert", str(path), str(out)])
    assert again.exit_code == 1 and "already exists" in again.output
