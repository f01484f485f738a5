"""What the engine's tests feed it: random token ids cut into chunks, and policies with hand-made scores."""

from __future__ import annotations

import torch

from helpers.models import VOCAB
from locret_cli.core.policies import Policy
from locret_cli.inputs.sources import TokenChunk


class TablePolicy(Policy):
    """Hand-made scores: table[h, i] is the score of token i in KV head h (every layer alike)."""

    name = "table"

    def __init__(self, table: torch.Tensor):
        self.table = table

    def score(self, layer_idx, q, k, v, token_index):
        return self.table[:, token_index].unsqueeze(0).clone()


def chunks_of(ids: list[int], size: int) -> list[TokenChunk]:
    return [TokenChunk(ids[i:i + size], None, None, i + len(ids[i:i + size])) for i in range(0, len(ids), size)]


def random_ids(n: int, seed: int = 1) -> list[int]:
    return torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def distinct_table(kv_heads: int, n: int) -> torch.Tensor:
    """Head 0 prefers early tokens, head 1 a scrambled order: no ties, different choices per head."""
    rows = [-torch.arange(n, dtype=torch.float32), ((torch.arange(n) * 37) % 101).float() + torch.arange(n) / 1000]
    return torch.stack([rows[h % 2] for h in range(kv_heads)])


def greedy_answer(model, heads) -> tuple[list[int], torch.Tensor]:
    """The greedy tokens and the question's logits after a locret read of 160 random tokens (budget 40, chunk 32):
    what a speed-up that must not change a result is checked against."""
    from locret_cli.core.engine import Engine
    from locret_cli.core.policies.locret import LocretPolicy
    from locret_cli.inputs.prompt import PromptTokens
    from locret_cli.settings import AnswerSettings, ReadSettings

    engine = Engine(model, LocretPolicy(heads), ReadSettings(budget=40, chunk_size=32, stabilizers=8),
                    PromptTokens(stop_ids=frozenset()), answering=AnswerSettings(max_new_tokens=16))
    engine.read(chunks_of(random_ids(160), 32))
    logits = engine.forward([3, 4, 5, 6, 7, 8], score=False)  # more rows than a rows kernel takes: a chunk
    return engine.decode(engine.sampler.pick(logits))[0], logits
