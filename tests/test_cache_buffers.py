"""The cache's preallocated buffers: appends write in place, forks share until one would overwrite the other."""

from __future__ import annotations

import pytest
import torch
from helpers.engines import chunks_of, random_ids
from helpers.models import tiny_model

from locret_cli.core.cache.bounded import LocretCache
from locret_cli.core.engine import Engine
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.errors import LocretError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import AnswerSettings, ReadSettings


def fill(cache: LocretCache, start: int, count: int, value: float = 1.0) -> None:
    """Append `count` entries to layer 0 whose keys all hold `value`, token indices start.."""
    layer = cache.layers[0]
    index = torch.arange(start, start + count)
    cache.stage(index, index)
    layer.update(torch.full((1, 2, count, 4), value), torch.full((1, 2, count, 4), value))


def test_appends_write_into_one_buffer_reserved_up_front():
    cache = LocretCache(1, reserved=32)
    fill(cache, 0, 20)  # twice the first append, capped at the reservation: 32 entries of room
    storage = cache.layers[0].buffers.tensors["keys"].data_ptr()
    for step in range(12):
        fill(cache, 20 + step, 1)
    layer = cache.layers[0]
    assert layer.buffers.capacity == 32 and layer.buffers.tensors["keys"].data_ptr() == storage
    assert layer.keys.data_ptr() == storage and layer.length == 32
    assert layer.origins[0, 0].tolist() == list(range(32))


def test_growth_past_the_reservation_keeps_every_entry_and_one_step_of_room():
    cache = LocretCache(1, reserved=0, step=4)
    for step in range(10):
        fill(cache, step * 3, 3, value=float(step))
    layer = cache.layers[0]
    assert layer.length == 30 and layer.buffers.capacity == 32  # grown 4 at a time
    assert layer.keys[0, 1, :, 0].tolist() == [float(i // 3) for i in range(30)]


def test_fitting_leaves_whole_buffers_of_the_same_entries_that_grow_again_on_the_next_append():
    cache = LocretCache(1, reserved=32)
    fill(cache, 0, 5, value=3.0)
    before = {name: t.clone() for name, t in cache.layers[0].tensors().items()}
    cache.fit()
    layer = cache.layers[0]
    assert layer.buffers.capacity == 5 and layer.length == 5
    for name, t in layer.tensors().items():
        assert torch.equal(t, before[name])
        assert t.contiguous().data_ptr() == layer.buffers.tensors[name].data_ptr()  # saved without a copy
    fill(cache, 5, 1, value=4.0)
    assert layer.buffers.capacity == 12 and layer.keys[0, 0, :, 0].tolist() == [3.0] * 5 + [4.0]


def test_a_fork_shares_the_entries_and_appends_without_touching_its_parent():
    cache = LocretCache(1, reserved=16)
    fill(cache, 0, 6, value=1.0)
    fork = cache.fork()
    fill(fork, 6, 3, value=2.0)
    assert fork.layers[0].buffers is cache.layers[0].buffers  # no copy: the fork wrote past the shared entries
    assert cache.length() == 6 and fork.length() == 9
    assert cache.layers[0].keys.unique().tolist() == [1.0]
    assert fork.layers[0].keys[0, 0, :, 0].tolist() == [1.0] * 6 + [2.0] * 3


def test_a_fork_whose_entries_were_overwritten_refuses_to_go_on():
    cache = LocretCache(1, reserved=16)
    fill(cache, 0, 6)
    first = cache.fork()
    fill(first, 6, 2, value=2.0)
    second = cache.fork()
    fill(second, 6, 2, value=3.0)  # the tail now belongs to the second fork
    with pytest.raises(LocretError, match="overwritten by another fork"):
        fill(first, 8, 1)


def test_rewriting_shared_entries_takes_a_private_copy_first():
    cache = LocretCache(1, reserved=16)
    fill(cache, 0, 6, value=1.0)
    fork = cache.fork()
    fork.layers[0].set("scores", torch.full((1, 2, 6), 5.0))
    fork.evict(0, torch.tensor([[[1, 3], [0, 5]]]))
    assert fork.layers[0].buffers is not cache.layers[0].buffers
    assert cache.layers[0].scores.unique().tolist() == [0.0] and cache.length() == 6
    assert fork.layers[0].origins[0].tolist() == [[1, 3], [0, 5]] and fork.layers[0].scores.unique().tolist() == [5.0]


def test_decoding_appends_in_place_and_gives_the_same_tokens_as_a_reread():
    model = tiny_model("llama")
    heads = RetainingHeads.for_model(model)
    settings = ReadSettings(budget=48, chunk_size=32, stabilizers=8)
    answering = AnswerSettings(max_new_tokens=12)
    ids = random_ids(200)

    def engine():
        reader = Engine(model, LocretPolicy(heads), settings, PromptTokens(stop_ids=frozenset()), answering=answering)
        reader.read(chunks_of(ids, 32))
        return reader

    reader = engine()
    fork = reader.fork()
    fork.forward([3, 4, 5], score=False)
    storage = fork.cache.layers[0].buffers.tensors["keys"].data_ptr()
    tokens = fork.decode(7)[0]
    assert fork.cache.layers[0].buffers.tensors["keys"].data_ptr() == storage
    assert fork.cache.layers[0].buffers is reader.cache.layers[0].buffers
    again = engine().fork()
    again.forward([3, 4, 5], score=False)
    assert again.decode(7)[0] == tokens


@pytest.mark.parametrize("kv_bits", [16, 8, 4])
def test_keeping_entries_takes_each_heads_own_from_every_stored_part(kv_bits):
    cache = LocretCache(1, reserved=40, kv_bits=kv_bits)
    layer = cache.layers[0]
    index = torch.arange(30)
    cache.stage(index, index)
    generator = torch.Generator().manual_seed(0)
    layer.update(*(torch.randn(2, 3, 30, 8, generator=generator) for _ in range(2)))
    before = {name: t.clone() for name, t in layer.tensors().items()}
    keep = torch.stack([torch.randperm(30, generator=generator)[:12].sort().values for _ in range(6)]).view(2, 3, 12)
    layer.keep(keep)
    after = layer.tensors()
    assert set(after) == set(before) and len(before) == {16: 5, 8: 7, 4: 9}[kv_bits]
    for name, t in before.items():
        expected = torch.stack([torch.stack([t[b, h, keep[b, h]] for h in range(3)]) for b in range(2)])
        assert torch.equal(after[name], expected), name
