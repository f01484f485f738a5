"""Labels for retaining heads, exactly as the method defines them.

For layer l, KV head g and prompt token k: label = max over answer positions p and query heads h of g's group of
the pre-softmax score (Q Kᵀ)[h, p, k] · scaling, with Q and K post-RoPE as the model computes them.

The scores are taken inside the model's own attention call (`core/attention/probe.py`), from the real query and key after any
q/k norm and RoPE, and reduced block by block, so no T×T matrix is ever built. Training computes them in the same
forward that feeds the heads (`trainer.py`); `compute_labels` is the standalone form.
"""

from __future__ import annotations

import torch

from locret_cli.core.attention.probe import observe_attention
from locret_cli.core.transformers_internals import decoder_stack

KEY_BLOCK = 4096
QUERY_BLOCK = 512


def answer_to_prompt_max(query: torch.Tensor, key: torch.Tensor, prompt_length: int, scaling: float) -> torch.Tensor:
    """query (1, H, T, D), key (1, Hkv, T, D) -> (Hkv, prompt_length) float32: the max over answer positions
    (T > p >= prompt_length) and over each KV head's query group of q·k·scaling, computed in blocks."""
    heads, kv_heads = query.shape[1], key.shape[1]
    group = heads // kv_heads
    answers = query[0, :, prompt_length:].float()
    keys = key[0, :, :prompt_length].float()
    out = torch.full((kv_heads, prompt_length), float("-inf"), device=query.device)
    for g in range(kv_heads):
        block_queries = answers[g * group:(g + 1) * group].reshape(-1, answers.shape[-1])
        for k0 in range(0, prompt_length, KEY_BLOCK):
            k_block = keys[g, k0:k0 + KEY_BLOCK]
            for q0 in range(0, block_queries.shape[0], QUERY_BLOCK):
                scores = block_queries[q0:q0 + QUERY_BLOCK] @ k_block.T
                out[g, k0:k0 + KEY_BLOCK] = torch.maximum(out[g, k0:k0 + KEY_BLOCK], scores.max(dim=0).values)
    return out * scaling


@torch.no_grad()
def compute_labels(model, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
    """Labels (layers, kv_heads, len(prompt_ids)) float32 for one example, from one forward of the frozen model."""
    layers: dict[int, torch.Tensor] = {}

    def observe(layer_idx, query, key, scaling):
        layers[layer_idx] = answer_to_prompt_max(query, key, len(prompt_ids), scaling)

    with observe_attention(model, observe):
        decoder_stack(model)(input_ids=torch.tensor([prompt_ids + answer_ids], device=model.device))
    return torch.stack([layers[i] for i in sorted(layers)]).cpu()
