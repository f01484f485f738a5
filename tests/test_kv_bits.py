"""`--kv-bits 8|4`: keys and values quantized per entry and head, scores and positions exact, and saved as held."""

from __future__ import annotations

import pytest
import torch
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model

from locret_cli.api import load_session
from locret_cli.api.saved_context import save_reading
from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.cache.quantized import decode, encode, entry_bytes
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings

STEPS = {8: 127, 4: 15}  # the steps across an entry's range (8 bits: half of it, either side of zero)


def entries(seed: int = 0, n: int = 10) -> torch.Tensor:
    """(1, 2, n, 8) values of very different sizes per entry, one entry all zeros."""
    torch.manual_seed(seed)
    values = torch.randn(1, 2, n, 8) * torch.logspace(-3, 2, n)[None, None, :, None]
    values[0, 1, 3] = 0.0
    return values


@pytest.mark.parametrize("bits", [8, 4])
def test_each_entry_rounds_to_within_half_of_its_own_step(bits):
    values = entries()
    stored = encode("keys", values, bits)
    assert stored["keys"].shape[-1] == (8 if bits == 8 else 4)  # 4 bits: two codes a byte
    back = decode("keys", stored, bits, torch.float32)
    span = values.abs().amax(-1) if bits == 8 else values.amax(-1) - values.amin(-1)
    step = span / STEPS[bits]
    assert ((back - values).abs() <= step[..., None] / 2 + 1e-6).all()
    assert back[0, 1, 3].abs().sum() == 0
    exact = encode("scores", values[..., 0], bits)  # exact fields stay as given
    assert list(exact) == ["scores"] and torch.equal(exact["scores"], values[..., 0])


def fill(cache: LocretCache, values: torch.Tensor, scores: torch.Tensor) -> None:
    n = values.shape[2]
    cache.stage(torch.arange(n), torch.arange(n))
    cache.stage_scores(0, scores)
    cache.layers[0].update(values, values * 2)


@pytest.mark.parametrize("bits", [8, 4])
def test_the_cache_holds_codes_reads_values_and_evicts_the_same_entries(bits):
    values, scores = entries(), torch.rand(1, 2, 10)
    exact, quantized = LocretCache(1, reserved=16), LocretCache(1, reserved=16, kv_bits=bits)
    fill(exact, values, scores)
    fill(quantized, values, scores)
    layer = quantized.layers[0]
    assert layer.buffers.tensors["keys"].dtype == (torch.int8 if bits == 8 else torch.uint8)
    assert torch.equal(layer.keys, decode("keys", encode("keys", values, bits), bits, torch.float32))
    keep = scores.topk(4, dim=-1).indices.sort(dim=-1).values
    exact.evict(0, keep)
    quantized.evict(0, keep)
    assert torch.equal(layer.origins, exact.layers[0].origins) and torch.equal(layer.scores, exact.layers[0].scores)
    kept = values.gather(2, keep[..., None].expand(-1, -1, -1, 8))
    assert torch.equal(layer.keys, decode("keys", encode("keys", kept, bits), bits, torch.float32))
    assert layer.nbytes() == 4 * 2 * (2 * entry_bytes(8, 4, bits) + 12)  # entries x heads x (key, value, 3 exact)


def test_bad_kv_bits_are_refused_by_name():
    with pytest.raises(SettingError, match="kv_bits must be 16, 8 or 4"):
        ReadSettings(kv_bits=5).checked()


@pytest.mark.parametrize("bits", [8, 4])
def test_a_read_in_fewer_bits_keeps_the_budget_in_fewer_bytes_and_moves_keys_from_quantized_ones(bits):
    model = tiny_model("llama")
    heads = RetainingHeads.for_model(model)
    settings = ReadSettings(budget=48, chunk_size=32, stabilizers=8)
    ids = random_ids(300)
    readers = {}
    for kv_bits in (16, bits):
        reader = Engine(model, LocretPolicy(heads), ReadSettings(**{**settings.__dict__, "kv_bits": kv_bits}),
                        PromptTokens(stop_ids=frozenset()))
        reader.read(chunks_of(ids, 32))
        readers[kv_bits] = reader
    exact, small = readers[16].cache, readers[bits].cache
    assert small.length() == exact.length() == 48
    assert small.nbytes() < exact.nbytes() * (0.6 if bits == 8 else 0.4)
    layer = small.layers[1]
    assert "unrotated_scale" in layer.buffers.tensors  # compact positions moved keys, from quantized unrotated ones
    assert layer.keys.dtype == torch.float32 and torch.isfinite(layer.keys).all()


@pytest.mark.parametrize("bits", [8, 4])
def test_a_saved_context_keeps_the_codes_and_answers_alike(tmp_path, bits):
    session = load_session(device="cpu")
    document = tmp_path / "part.txt"
    document.write_text(open("samples/handbook.txt").read()[:30_000])
    reading = session.read(str(document), session.plan(read={"kv_bits": bits}).read)
    path = tmp_path / "part.locret"
    save_reading(reading, path, session.heads)
    loaded = session.open(str(path))
    assert loaded.settings.kv_bits == bits
    for original, restored in zip(reading.engine.cache.layers, loaded.engine.cache.layers):
        for name in ("keys", "keys_scale", "values", "values_scale", "scores", "positions", "origins"):
            assert torch.equal(original.tensors()[name], restored.tensors()[name]), name
    question = "What is the gate code of the north depot?"
    direct, again = reading.ask(question), loaded.ask(question)
    assert direct.answer == again.answer and direct.to_json()["kv_bits"] == bits
