"""Labels for retaining heads, exactly as the method defines them.

For layer l, KV head g and prompt token k: label = max over answer positions p and query heads h of g's group of
the pre-softmax score (Q Kᵀ)[h, p, k] · scaling, with Q and K post-RoPE as the model computes them.

The scores are taken inside the model's own attention call (`probe.py`), from the real query and key after any
q/k norm and RoPE, and reduced block by block, so no T×T matrix is ever built. Labels are cached on disk, keyed
by the model and the examples' token ids.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from locret_cli.probe import observe_attention

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
        model.model(input_ids=torch.tensor([prompt_ids + answer_ids], device=model.device))
    return torch.stack([layers[i] for i in sorted(layers)]).cpu()


def cache_key(model, examples) -> str:
    """Hash of what the labels depend on: the model's config and weights' identity, and every example's token ids
    (which carry the data, `max_len` and the prompt layout)."""
    digest = hashlib.sha256()
    digest.update(json.dumps(model.config.to_dict(), sort_keys=True, default=str).encode())
    digest.update(str(getattr(model, "name_or_path", "")).encode())
    first = next(model.parameters())
    digest.update(first.detach().float().flatten()[:4096].cpu().numpy().tobytes())
    for example in examples:
        digest.update(json.dumps([example.prompt_ids, example.answer_ids]).encode())
    return digest.hexdigest()[:16]


class LabelCache:
    """One safetensors file of labels per example under `directory`, computed on first use."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def get(self, index: int, model, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
        path = self.directory / f"{index}.safetensors"
        if path.exists():
            return load_file(str(path))["labels"].float()
        labels = compute_labels(model, prompt_ids, answer_ids)
        save_file({"labels": labels.half().contiguous()}, str(path))
        return labels.half().float()
