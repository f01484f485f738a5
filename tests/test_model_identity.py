"""Heads know the model they were trained for: the same weights in another precision match, other weights of the
same shape do not, shipped heads are picked up by identity, and nf4 (bitsandbytes) runs on the CPU."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from helpers.heads import save_heads_for
from helpers.models import save_model_dir, tiny_model

from locret_cli.api import load_session
from locret_cli.core.identity import SAME_MODEL, same_model, sample_index, weights_identity
from locret_cli.errors import LocretError
from locret_cli.models import shipped
from locret_cli.models.heads_files import load_heads
from locret_cli.models.loading import load_model


def fake_4bit(model, block: int = 32):
    """A copy of `model` whose weights are rounded to 16 levels per block of 32 values, as Q4_1 stores them."""
    copy = tiny_model("llama")
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for param in copy.parameters():
            flat = param.reshape(-1, block) if param.numel() % block == 0 else param.reshape(1, -1)
            low, high = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
            scale = (high - low).clamp_min(1e-12) / 15
            flat.copy_(((flat - low) / scale).round() * scale + low)
    return copy


def test_the_same_weights_in_4_bits_match_and_other_weights_do_not():
    model = tiny_model("llama", seed=0)
    identity = weights_identity(model)
    assert same_model(model, identity) == (True, pytest.approx(1.0))
    match, cosine = same_model(fake_4bit(model), identity)
    assert match and 0.99 < cosine < 1.0
    match, cosine = same_model(tiny_model("llama", seed=1), identity)
    assert not match and abs(cosine) < 0.3
    assert same_model(tiny_model("mistral"), identity) == (False, 0.0)  # another shape


def test_samples_span_big_tensors_exactly():
    numel = 49152 * 576  # SmolLM2's embeddings: past float32's exact integers
    index = sample_index(numel)
    assert index[0] == 0 and index[-1] == numel - 1 and bool((index[1:] > index[:-1]).all())


def test_heads_recorded_for_other_weights_are_refused_in_one_line(tmp_path):
    heads = save_heads_for(tiny_model("llama", seed=0), tmp_path / "heads")
    assert load_heads(heads, fake_4bit(tiny_model("llama", seed=0))).hidden == 16
    with pytest.raises(LocretError, match=rf"another model of this shape .*cosine -?0\.\d\d; .* above {SAME_MODEL}\)$"):
        load_heads(heads, tiny_model("llama", seed=1))


def test_shipped_heads_and_their_settings_come_with_the_matching_model(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    save_heads_for(tiny_model("llama", seed=1), root / "other-model")
    save_heads_for(tiny_model("llama", seed=0), root / "this-model", {"budget": 48, "chunk_size": 16})
    monkeypatch.setattr(shipped, "HEADS_ROOT", root)
    found = shipped.find_shipped(fake_4bit(tiny_model("llama", seed=0)))
    assert found.directory == root / "this-model" and found.defaults == {"budget": 48, "chunk_size": 16}
    assert shipped.find_shipped(tiny_model("llama", seed=2)) is None

    model_dir = save_model_dir(tiny_model("llama", seed=0), tmp_path / "model")
    session = load_session(str(model_dir), device="cpu", dtype="fp32")  # no --heads: the shipped ones
    assert session.heads is not None and session.heads.hidden == 16
    assert (session.plan().read.budget, session.plan().read.chunk_size) == (48, 16)
    given = load_session(str(model_dir), heads=str(root / "this-model"), device="cpu", dtype="fp32")
    assert given.heads is not None and given.plan().read.budget == 6000  # the user's heads: no shipped settings
    other_dir = save_model_dir(tiny_model("llama", seed=2), tmp_path / "other")
    with pytest.raises(LocretError, match="needs retaining heads"):
        load_session(str(other_dir), device="cpu", dtype="fp32")


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None,
                    reason="bitsandbytes is the [4bit] extra: pip install 'locret-cli[4bit]'")
def test_nf4_on_the_cpu_is_the_same_model_and_reads_a_document(tmp_path):
    model_dir = save_model_dir(tiny_model("llama", seed=0), tmp_path / "model")
    full = load_model(str(model_dir), device="cpu", dtype="fp32")
    nf4 = load_model(str(model_dir), device="cpu", dtype="fp32", load_4bit=True)
    assert type(nf4.model.model.layers[0].self_attn.q_proj).__name__ == "Linear4bit"
    match, cosine = same_model(nf4.model, weights_identity(full.model))
    assert match and cosine < 1.0
    heads = save_heads_for(full.model, tmp_path / "heads")
    session = load_session(str(model_dir), heads=str(heads), device="cpu", dtype="fp32", load_4bit=True)
    document = tmp_path / "d.txt"
    document.write_text("The gate code of the north depot is 4821. " * 30)
    result = session.ask(str(document), "What is the gate code?",
                         session.plan(read={"budget": 64, "chunk_size": 32, "stabilizers": 16}).read,
                         session.plan(answer={"max_new_tokens": 3}).answer)
    assert result.kv_cache.kept_tokens == 64 and result.document.tokens > 64 and result.policy == "locret"
