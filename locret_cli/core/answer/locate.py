"""Where in the document an answer looked: windows of token indices around the attention it paid, for re-reading
them with a full cache (`core/answer/reread.py`)."""

from __future__ import annotations

import torch

PEAK_TOKENS = 64  # a window is centred on the densest run of this many tokens that is left
RARE = 1000  # a question's token counts as a word to look for when at most 1 in RARE of the input's tokens is it


def attention_per_token(origins: torch.Tensor, weights: torch.Tensor, tokens: int, skip: int) -> torch.Tensor:
    """The attention each token index of the input received, summed over layers, heads and queries: (tokens,)
    float64. origins, weights: (n,) the kept entries' token indices and what they received; the first `skip`
    tokens (the prompt's head, where attention sinks sit) get none."""
    per_token = torch.zeros(tokens, dtype=torch.float64)
    per_token.index_add_(0, origins.long().cpu(), weights.double().cpu())
    per_token[:skip] = 0
    return per_token


def question_words_per_token(input_ids: torch.Tensor, question_ids: list[int], skip: int) -> torch.Tensor:
    """Where the question's rarer tokens occur in the input: (tokens,) float64, each occurrence of a token of
    `question_ids` weighted log(RARE * share) where share is 1 / its frequency in the input, when that is above 0
    (tokens as common as one in RARE, such as " the", weigh nothing); the first `skip` tokens get nothing."""
    ids = input_ids.long().cpu()
    wanted = torch.tensor(sorted(set(question_ids)), dtype=torch.int64)
    counts = torch.bincount(ids, minlength=int(max(ids.max(), wanted.max())) + 1 if len(ids) else 0).double()
    weight = (len(ids) / (RARE * counts[wanted].clamp(min=1))).log().clamp(min=0)
    table = torch.zeros(len(counts), dtype=torch.float64)
    table[wanted] = weight
    per_token = table[ids]
    per_token[:skip] = 0
    return per_token


def best_windows(per_token: torch.Tensor, count: int, size: int, start: int = 0) -> list[tuple[int, int]]:
    """Up to `count` windows [first, end) of token indices, `size` long (shorter at the input's ends), each centred
    on the attention in the densest run of PEAK_TOKENS tokens not yet in a window, in document order, windows that
    overlap merged (so they never hold more than count * size tokens); none begins before `start` (the prompt's
    head). Runs that received nothing are never chosen."""
    n = len(per_token)
    peak = min(PEAK_TOKENS, size, max(n - start, 1))
    sums = torch.cat([torch.zeros(1, dtype=torch.float64), per_token.cumsum(0)])
    density = sums[peak:] - sums[:-peak]  # density[s]: attention on tokens s .. s + peak - 1
    chosen: list[tuple[int, int]] = []
    for _ in range(count):
        if not len(density) or float(density.max()) <= 0:
            break
        run = int(density.argmax())
        positions = torch.arange(run, run + peak, dtype=torch.float64)
        centre = int((positions * per_token[run:run + peak]).sum() / per_token[run:run + peak].sum())
        first = max(start, min(centre - size // 2, n - size))
        end = min(n, first + size)
        chosen.append((first, end))
        density[max(first - peak + 1, 0): end] = float("-inf")
    return joined(chosen)


def joined(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Windows [first, end) in document order, those that overlap or touch joined into one."""
    merged: list[tuple[int, int]] = []
    for first, end in sorted(windows):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((first, end))
    return merged
