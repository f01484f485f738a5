"""`cache_attention` on CUDA against the masked attention it stands in for, at the shapes the engine meets.

    python -m research.gpu.check_cache_attention

Each case is (chunk tokens, kept entries, heads, KV heads, head dim) in bf16 on the GPU; the reference is SDPA with
the chunk's mask in fp32 on the same inputs. Prints each case's largest difference and exits 1 when one passes the
tolerance. The CPU path has the same check in the suite (tests/test_cache_attention.py); CI has no GPU.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from locret_cli.core.attention.over_cache import cache_attention

CASES = [(1, 4096, 9, 3, 64), (1, 16384, 32, 8, 128), (1024, 4096, 9, 3, 64), (3072, 16384, 32, 8, 128),
         (256, 0, 9, 3, 64), (7, 50, 32, 8, 128), (1, 0, 9, 3, 64)]
TOLERANCE = 2e-2  # bf16 keeps 8 bits of mantissa; the outputs are averages of unit-variance values


def masked(query, key, value, scale):
    length, entries = query.shape[2], key.shape[2]
    mask = torch.ones(length, entries, dtype=torch.bool, device=query.device).tril(diagonal=entries - length)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale, enable_gqa=True)


def main() -> None:
    worst = 0.0
    for length, kept, heads, kv_heads, dim in CASES:
        torch.manual_seed(length + kept)
        query = torch.randn(1, heads, length, dim, device="cuda", dtype=torch.bfloat16)
        key, value = (torch.randn(1, kv_heads, length + kept, dim, device="cuda", dtype=torch.bfloat16)
                      for _ in range(2))
        scale = dim ** -0.5
        got = cache_attention(query, key, value, scale).float()
        want = masked(query.float(), key.float(), value.float(), scale)
        difference = (got - want).abs().max().item()
        worst = max(worst, difference)
        print(f"chunk {length}, kept {kept}, heads {heads}/{kv_heads}, dim {dim}: largest difference {difference:.2e}")
    print(f"worst {worst:.2e} against tolerance {TOLERANCE:.0e}: {'ok' if worst <= TOLERANCE else 'FAILED'}")
    sys.exit(0 if worst <= TOLERANCE else 1)


if __name__ == "__main__":
    main()
