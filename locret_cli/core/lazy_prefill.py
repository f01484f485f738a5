"""Lazy prefill: LazyLLM's progressive token pruning, decided by the eviction policy's own scores.

Inside each chunk, once layer L (`ReadSettings.lazy_after` = L + 1 layers) has scored its entries, the chunk's tokens
that layer L's eviction would drop in every KV head stop flowing: the layers above L never compute them, so those
tokens have entries only in layers 0..L. What still flows:
    - every chunk token that some KV head of layer L keeps among its top `budget` (`policies.select`, with the same
      pinned entries, stabilizers and spans as the eviction after the chunk), the chunk's last `stabilizers` tokens
      among them;
    - the chunk's last token, always (the next token's logits are read from it);
    - with `lazy_share` < 1, the best-scored of the others, so that at most that share of the chunk is pruned;
    - and as many more of the best-scored as round their number up to a multiple of `step` (the engine's is a
      sixteenth of the chunk).
Layer L keeps at least `budget` entries per head, and every pruned token is one it would drop, so each layer above L
still holds at least `budget` entries when the chunk's eviction runs: after it, every layer holds `budget` again.

The layers above L run on the sliced hidden states, with their rotary angles, position ids and (where the model
builds one) attention mask sliced to match; the cache stages their positions and origins for the flowing tokens
only. Hooks are forward pre-hooks on the model's own decoder layers, removed on exit: no modeling code is forked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from locret_cli.core.policies.base import Policy, select
from locret_cli.core.transformers_internals import decoder_layers, layer_call_for
from locret_cli.errors import SettingError
from locret_cli.settings import ReadSettings

# decide() -> the indices (K,) of the chunk's tokens that flow above layer L, ascending, or None when all do
Decider = Callable[[], torch.Tensor | None]


def flowing_tokens(scores: torch.Tensor, origins: torch.Tensor, new: int, budget: int, stabilizers: int,
                   pinned: int, span: int, share: float, step: int = 1) -> torch.Tensor | None:
    """Which of the last `new` entries (a chunk's tokens) keep flowing above a layer whose entries are `scores`
    (B, kv_heads, n) with `origins` (B, kv_heads, n); returns their indices among the chunk (K,) int64, ascending,
    or None when all of them flow (n <= budget, or nothing is pruned). See the module docstring for the rule; K is
    then rounded up to a multiple of `step` with the best-scored pruned tokens, so the layers above see few distinct
    shapes (each new one costs the CPU's matmul library a kernel and memory)."""
    n = scores.shape[-1]
    if n <= budget:
        return None
    first = n - new
    keep = select(scores, budget, stabilizers, pinned, origins, span)
    flows = torch.zeros(new, dtype=torch.bool, device=scores.device)
    flows[keep[keep >= first] - first] = True
    flows[-1] = True
    flowing = max(int(flows.sum()), new - int(share * new))
    flowing = min(new, -(-flowing // step) * step)
    if flowing == new:
        return None
    admitted = flowing - int(flows.sum())
    if admitted:  # the best-scored pruned tokens flow after all
        best = scores[..., first:].float().amax(dim=(0, 1)).masked_fill(flows, float("-inf"))
        flows[best.topk(admitted).indices] = True
    return flows.nonzero().squeeze(1)


@contextmanager
def lazy_layers(model, cache, after: int, decide: Decider) -> Iterator[None]:
    """Within the block, each forward pass of `model` asks `decide` which tokens flow above its first `after`
    layers, as the layer above them starts, and runs the layers above on those tokens only; `cache` (a LocretCache,
    its positions and origins staged for the whole chunk) stages theirs for those layers."""
    layers = decoder_layers(model)
    sliced: dict = {}  # this forward's kwargs for the layers above, sliced once; empty when every token flows

    def first_above(_module, args, kwargs):
        sliced.clear()
        index = decide()
        if index is None:
            return None
        for layer in cache.layers[after:]:
            layer.staged_positions = layer.staged_positions.index_select(0, index)
            layer.staged_origins = layer.staged_origins.index_select(0, index)
        args, kwargs, shared = layer_call_for(args, kwargs, index)
        sliced.update(shared)
        return args, kwargs

    def above(_module, args, kwargs):
        return (args, {**kwargs, **sliced}) if sliced else None

    handles = []
    try:
        for i, layer in enumerate(layers[after:]):
            handles.append(layer.register_forward_pre_hook(above if i else first_above, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def check_lazy(settings: ReadSettings, policy: Policy, layers: int, sliding: bool = False,
               guided: bool = False) -> None:
    """Refuse lazy prefill where its rule has nothing to go by: a policy that never evicts or reads the question
    after each chunk, a read `guided` by its questions (`question_share`: the questions are read after the chunk
    that lazy prefill has already pruned), or a cut at or above the model's last layer; and on a model with sliding
    layers, which must see every token to hold their window."""
    if not settings.lazy_after:
        return
    if sliding:
        raise SettingError("{lazy_after} skips tokens in the upper layers, and this model's sliding layers must see "
                           "every token; read it without {lazy_after}" + (" (the {policy} {policy_value} policy "
                           "prunes)" if policy.prunes else ""), policy_value=policy.name)
    if not policy.evicts or policy.reads_question:
        raise SettingError("{lazy_after} prunes by an eviction policy's scores, and {policy} {policy_value} has none "
                           "to prune by", policy_value=policy.name)
    if guided:
        raise SettingError("{lazy_after} prunes tokens before the questions are read after them; read with "
                           "{question_share} 0 or without {lazy_after}")
    if settings.lazy_after >= layers:
        raise SettingError("{lazy_after} must be below the model's {layers} layers, got {value}", layers=layers,
                           value=settings.lazy_after)
