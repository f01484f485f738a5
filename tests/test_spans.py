"""Span eviction (`--span`): entries are kept or dropped in blocks of document tokens, exactly as a plain-Python
reference says, under both position modes."""

from __future__ import annotations

import pytest
import torch
from helpers.engines import TablePolicy, chunks_of, distinct_table, random_ids

from locret_cli.core.engine import Engine
from locret_cli.core.policies import select
from locret_cli.errors import SettingError
from locret_cli.inputs.prompt import PromptTokens
from locret_cli.settings import ReadSettings


def reference_kept(table: torch.Tensor, n: int, chunk: int, budget: int, stabilizers: int, pinned: int,
                   span: int) -> list[list[int]]:
    """Chunk by chunk, per head: the first `pinned` and last `stabilizers` entries stay; the rest are ranked by the
    best score in their block (token index // span) among the entries held, ties in token order."""
    kept = [[] for _ in range(table.shape[0])]
    for start in range(0, n, chunk):
        for h in range(table.shape[0]):
            candidates = kept[h] + list(range(start, min(start + chunk, n)))
            if len(candidates) > budget:
                best = {}
                for i in candidates:
                    best[i // span] = max(best.get(i // span, float("-inf")), float(table[h, i]))
                fixed = candidates[:pinned] + candidates[len(candidates) - stabilizers:]
                rest = sorted(candidates[pinned: len(candidates) - stabilizers], key=lambda i: (-best[i // span], i))
                candidates = sorted(fixed + rest[: budget - len(fixed)])
            kept[h] = candidates
    return kept


def test_select_keeps_the_best_blocks_whole_and_cuts_only_the_last():
    scores = torch.tensor([[[0.0, 9.0, 0.1, 0.2, 1.0, 1.1, 1.2, 1.3, 5.0, 0.3, 0.4, 0.0]]])
    origins = torch.arange(12, dtype=torch.int32).view(1, 1, -1)
    # blocks of 4: [0-3] best 9, [4-7] best 1.3, [8-11] best 5; budget 6 with the last entry a stabilizer
    assert select(scores, 6, 1, 0, origins, span=4).tolist() == [[[0, 1, 2, 3, 8, 11]]]
    # span 1 is the plain rule: the best single entries
    assert select(scores, 6, 1, 0, origins, span=1).tolist() == [[[1, 5, 6, 7, 8, 11]]]


@pytest.mark.parametrize("pinned", [0, 3])
@pytest.mark.parametrize("positions", ["original", "compact"])
def test_span_eviction_keeps_exactly_the_reference_blocks(llama, positions, pinned):
    n, budget, chunk, stab, span = 64, 20, 8, 3, 4
    table = distinct_table(2, n)
    settings = ReadSettings(budget=budget, chunk_size=chunk, stabilizers=stab, positions=positions, span=span)
    engine = Engine(llama, TablePolicy(table), settings, PromptTokens(stop_ids=frozenset({1}), pinned=pinned))
    for chunk_ids in chunks_of(random_ids(n), chunk):
        engine.prefill_chunk(chunk_ids.ids)
        reference = reference_kept(table, engine.seen, chunk, budget, stab, pinned, span)
        for layer in engine.cache.layers:
            assert layer.origins[0].tolist() == reference


def test_a_span_below_one_is_refused():
    with pytest.raises(SettingError, match="^span must be positive"):
        ReadSettings(span=0).checked()
