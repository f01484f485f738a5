"""The kernel timings behind docs/measurements/: bf16 linears packed or not, a decode step's linears, SDPA's mask.

    python benchmarks/kernel_microbench.py linear    # one weight, 1 to 3,072 rows: F.linear vs oneDNN packed
                                                       # (locret packs only one-row products: decoding)
    python benchmarks/kernel_microbench.py chain     # all linears of one SmolLM2-shaped decode step, 1 and 2 threads
    python benchmarks/kernel_microbench.py sdpa      # one layer's chunk attention, with and without its mask
    python benchmarks/kernel_microbench.py chunk     # one layer's chunk attention as the engine runs it: torch's
                                                       # flash kernels (split) against locret's AVX-512 BF16 kernel
    python benchmarks/kernel_microbench.py one-query # a decode step's attention: bf16 SDPA, cast to fp32, two bf16
                                                       # products around an fp32 softmax, or bf16 flash attention with
                                                       # the heads that share a KV head stacked as queries
    python benchmarks/kernel_microbench.py kernel-query  # a decode step's attention by locret's kernels (bf16 with
                                                       # AVX-512 BF16, fp32 with AVX2) and torch's flash kernel,
                                                       # SmolLM2's and the Qwens' shapes, every layer
    python benchmarks/kernel_microbench.py rates     # this CPU's matmul rates: bf16, fp32, packed bf16, int8;
                                                       # square and prefill-chunk shapes, 1 and 2 threads
    python benchmarks/kernel_microbench.py rows      # all linears of one decode step of Qwen2.5-1.5B and SmolLM2,
                                                       # bf16: F.linear, oneDNN packed (siblings joined, as locret
                                                       # packs them), locret's rows kernel on the weights in place
    python benchmarks/kernel_microbench.py int8-rows # the same Qwen2.5-1.5B step, fp32 and bf16 rows: the weights
                                                       # fp32, bf16 by locret's kernel, int8 by locret's kernel and
                                                       # by torch's `_weight_int8pack_mm` (`--load-8bit`), 4-bit
                                                       # by torch's int4 product and by locret's 4-bit kernel
                                                       # (`--load-int4`)

Each time is the mean of repeated calls after warm-up, in a process doing nothing else.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from locret_cli.bench.flops import memory_rate

SMOLLM2_LINEARS = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]


def seconds(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def packed(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def packed_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def linear() -> None:
    print("| weight (out × in) | rows | bf16 F.linear µs | bf16 packed µs | fp32 F.linear µs |")
    print("|---|---:|---:|---:|---:|")
    for out_features, in_features in ((1536, 576), (192, 576), (576, 1536)):
        weight = torch.randn(out_features, in_features, dtype=torch.bfloat16)
        for rows in (1, 1024, 3072):
            x = torch.randn(1, rows, in_features, dtype=torch.bfloat16)
            weight_packed, x32, weight32 = packed(weight, rows), x.float(), weight.float()
            if rows == 1:  # what locret relies on; chunks may round differently, so they keep F.linear
                assert torch.equal(packed_linear(x, weight_packed), F.linear(x, weight))
            repeats = 200 if rows == 1 else 20
            times = [seconds(lambda: F.linear(x, weight), repeats), seconds(lambda: packed_linear(x, weight_packed),
                     repeats), seconds(lambda: F.linear(x32, weight32), repeats)]
            print(f"| {out_features} × {in_features} | {rows:,} | " + " | ".join(f"{1e6 * t:,.0f}" for t in times)
                  + " |")


def chain() -> None:
    """One decode step's linears: 30 layers of SmolLM2-135M's projections and MLP, and the LM head, one row each,
    all distinct weights (so they stream from memory as in a real step)."""
    layers = [[packed(torch.randn(o, i, dtype=torch.bfloat16), 1) for o, i in SMOLLM2_LINEARS] for _ in range(30)]
    head = packed(torch.randn(49152, 576, dtype=torch.bfloat16), 1)
    inputs = {576: torch.randn(1, 1, 576, dtype=torch.bfloat16), 1536: torch.randn(1, 1, 1536, dtype=torch.bfloat16)}
    weight_bytes = 2 * (30 * sum(o * i for o, i in SMOLLM2_LINEARS) + 49152 * 576)

    def step():
        for weights in layers:
            for (_, in_features), weight in zip(SMOLLM2_LINEARS, weights):
                packed_linear(inputs[in_features], weight)
        packed_linear(inputs[576], head)

    for threads in (1, 2):
        torch.set_num_threads(threads)
        took = seconds(step, 20)
        print(f"{threads} thread(s): {1e3 * took:.1f} ms per step, {weight_bytes / took / 1e9:.1f} GB/s of weights")
    print(f"memory read (bench's 256 MiB sum): {memory_rate(torch.device('cpu')) / 1e9:.1f} GB/s")


def sdpa() -> None:
    """One layer's chunk attention, 9 query heads over 3 KV heads: a 512-token chunk over 1,024 kept entries (the
    speed settings) and a 1,024-token chunk over 4,096 (SmolLM2's recorded ones), with the chunk's mask (causal
    within the chunk, every kept entry visible) and without one, in bf16 and fp32."""
    print("| chunk | kept | dtype | with the mask | without a mask |")
    print("|---:|---:|---|---:|---:|")
    for chunk, kept in ((512, 1024), (1024, 4096)):
        total = chunk + kept
        mask = torch.ones(chunk, total, dtype=torch.bool).tril(diagonal=kept)[None, None]
        flops = 4 * 9 * 64 * chunk * (kept + chunk / 2)
        for dtype in (torch.bfloat16, torch.float32):
            q = torch.randn(1, 9, chunk, 64, dtype=dtype)
            k, v = (torch.randn(1, 3, total + 512, 64, dtype=dtype)[:, :, :total] for _ in range(2))  # buffer views
            cells = []
            for fn in (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                       lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)):
                took = seconds(fn, 10)
                cells.append(f"{1e3 * took:.2f} ms, {flops / took / 1e9:.0f} GFLOP/s")
            print(f"| {chunk:,} | {kept:,} | {str(dtype).removeprefix('torch.')} | " + " | ".join(cells) + " |")


def chunk() -> None:
    """One layer's chunk attention in bf16 as `cache_attention` computes it: torch's two flash calls merged
    (`split_attention`) and locret's kernel (`runtime/native_attention.py`), for SmolLM2's heads (9 over 3) and the
    embedded model's (4 over 2)."""
    from locret_cli.core.attention.over_cache import split_attention
    from locret_cli.runtime.native_attention import built_kernel

    kernel = built_kernel()
    if kernel is None:
        raise SystemExit("locret's kernel is not built here (no AVX-512 BF16, or no C compiler)")
    print("| heads / KV heads | chunk | kept | torch's flash, split | locret's kernel | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for heads, kv_heads, length, kept in ((9, 3, 512, 1024), (9, 3, 1024, 4096), (4, 2, 512, 1024)):
        total = length + kept
        flops = 4 * heads * 64 * length * (kept + length / 2)
        q = torch.randn(1, length, heads, 64, dtype=torch.bfloat16).transpose(1, 2)  # as transformers gives it
        k, v = (torch.randn(1, kv_heads, total + 512, 64, dtype=torch.bfloat16)[:, :, :total] for _ in range(2))
        took = [seconds(lambda fn=fn: fn(q, k, v, 0.125), 10) for fn in (split_attention, kernel.attend)]
        cells = [f"{1e3 * t:.2f} ms, {flops / t / 1e9:.0f} GFLOP/s" for t in took]
        print(f"| {heads} / {kv_heads} | {length:,} | {kept:,} | {cells[0]} | {cells[1]} | {took[0] / took[1]:.2f}x |")


def one_query() -> None:
    """A decode step's attention, one query of 9 heads over 3 KV heads: one layer's cache over and over (warm), and
    30 layers' distinct caches in turn (as a step reads them), four ways."""
    def products(q, k, v):
        scores = torch.matmul(q.reshape(1, 3, 3, 64), k.transpose(-1, -2)).float() * 0.125
        return torch.matmul(scores.softmax(dim=-1).to(q.dtype), v)

    ways = {"bf16 SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            "cast to fp32, SDPA": lambda q, k, v: F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), enable_gqa=True).to(q.dtype),
            "bf16 products, fp32 softmax": products,
            "bf16 flash, stacked": lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                q.reshape(1, 3, 3, 64), k, v, 0.0, False)[0]}
    print("| entries | layers | " + " | ".join(ways) + " |")
    print("|---:|---:|" + "---:|" * len(ways))
    for entries in (1024, 4096, 5200):
        for layers in (1, 30):
            caches = [(torch.randn(1, 9, 1, 64, dtype=torch.bfloat16),
                       *(torch.randn(1, 3, entries + 300, 64, dtype=torch.bfloat16)[:, :, :entries] for _ in range(2)))
                      for _ in range(layers)]
            cells = [f"{1e3 * seconds(lambda: [way(*c) for c in caches], 20):.2f} ms" for way in ways.values()]
            print(f"| {entries:,} | {layers} | " + " | ".join(cells) + " |")


def kernel_query() -> None:
    """A decode step's attention by locret's kernels against torch's flash kernel (the heads that share a KV head
    stacked as queries): one query per head over each layer's distinct cache in turn, as a step reads them, for the
    shapes of SmolLM2, Qwen2.5-Coder-0.5B and -1.5B; in bf16 by the AVX-512 BF16 kernel and in fp32 by the AVX2 one,
    each where it is built."""
    from locret_cli.runtime import native_attention, native_one_query

    kernels = {dtype: kernel for dtype, kernel in ((torch.bfloat16, native_attention.built_kernel()),
                                                   (torch.float32, native_one_query.built_kernel())) if kernel}
    if not kernels:
        raise SystemExit("locret's attention kernels are not built here (no AVX2, or no C compiler)")
    print("| shape (heads / KV heads / head size, layers) | dtype | entries | torch's flash, stacked "
          "| locret's kernel |")
    print("|---|---|---:|---:|---:|")
    for name, heads, kv_heads, dim, layers in (("SmolLM2", 9, 3, 64, 30), ("Qwen2.5-0.5B", 14, 2, 64, 24),
                                               ("Qwen2.5-1.5B", 12, 2, 128, 28)):
        for (dtype, kernel), entries in ((pair, n) for pair in kernels.items() for n in (1536, 4352)):
            caches = [(torch.randn(1, heads, 1, dim, dtype=dtype),
                       *(torch.randn(1, kv_heads, entries + 300, dim, dtype=dtype)[:, :, :entries]
                         for _ in range(2))) for _ in range(layers)]
            group = heads // kv_heads
            ways = (lambda q, k, v, shape=(1, kv_heads, group, dim): torch.ops.aten.
                    _scaled_dot_product_flash_attention_for_cpu(q.reshape(shape), k, v, 0.0, False)[0],
                    lambda q, k, v, scale=dim ** -0.5, kernel=kernel: kernel.attend(q, k, v, scale))
            cells = [f"{1e3 * seconds(lambda way=way, caches=caches: [way(*c) for c in caches], 20):.2f} ms"
                     for way in ways]
            print(f"| {name} ({heads} / {kv_heads} / {dim}, {layers}) | {str(dtype).removeprefix('torch.')} | "
                  f"{entries:,} | " + " | ".join(cells) + " |")


def rates() -> None:
    """GFLOP/s of one product in each arithmetic this CPU offers: square, and a 1,024-token chunk through SmolLM2's
    MLP up-projection (1,024 × 576 by 576 × 1,536); int8 is torch._int_mm (int8 × int8 → int32, oneDNN's VNNI or AMX
    path where the CPU has one)."""
    shapes = {"2048 × 2048 × 2048": (2048, 2048, 2048), "1024 × 1024 × 1024": (1024, 1024, 1024),
              "chunk: 1024 × 576 × 1536": (1024, 576, 1536)}
    print("| product (m × k × n) | threads | fp32 | bf16 | bf16 packed | int8 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (m, k, n) in shapes.items():
        a, w = torch.randn(m, k), torch.randn(n, k)
        a16, w16 = a.bfloat16(), w.bfloat16()
        a8, w8t = torch.randint(-127, 127, (m, k), dtype=torch.int8), torch.randint(-127, 127, (k, n), dtype=torch.int8)
        try:
            w16_packed = packed(w16, m)
        except RuntimeError:  # oneDNN packs bf16 only with AVX-512 or AVX-NE-CONVERT
            w16_packed = None
        for threads in (1, 2):
            torch.set_num_threads(threads)
            kernels = (lambda: F.linear(a, w), lambda: F.linear(a16, w16),
                       None if w16_packed is None else lambda: packed_linear(a16, w16_packed),
                       lambda: torch._int_mm(a8, w8t))
            cells = ["-" if fn is None else f"{2 * m * k * n / seconds(fn, 10) / 1e9:,.0f}" for fn in kernels]
            print(f"| {name} | {threads} | " + " | ".join(cells) + " |")
    print("GFLOP/s (int8: GOP/s), each the mean of 10 products after 3 warm-ups")


QWEN15_LINEARS = [(1536 + 2 * 256, 1536), (1536, 1536), (2 * 8960, 1536), (1536, 8960)]  # qkv, o, gate+up, down


def rows() -> None:
    """One decode step's linears, one bf16 row each, all distinct weights (so they stream from memory as in a real
    step): F.linear; oneDNN's packed weights with siblings joined (`runtime/packed_linear.py`, a copy of every
    weight); locret's kernel reading the weights in place (`runtime/native_rows.py`, siblings apart, as the model's
    modules hold them); and torch's int8-weight product on int8 weights of the same shapes."""
    from locret_cli.runtime.native_rows import kernels

    if kernels() is None:
        raise SystemExit("locret's rows kernel is not built here (no AVX2 and FMA, or no C compiler)")
    smollm2 = [(576 + 2 * 192, 576), (576, 576), (2 * 1536, 576), (576, 1536)]
    print("| shape | weights | F.linear | packed (+ a copy) | locret's kernel, in place | kernel / packed "
          "| int8 weights (`_weight_int8pack_mm`) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    qwen_splits = [[1536, 256, 256], [1536], [8960, 8960], [1536]]
    print(step_rows("Qwen2.5-1.5B", QWEN15_LINEARS, qwen_splits, 28, (151936, 1536)))
    print(step_rows("SmolLM2-135M", smollm2, [[576, 192, 192], [576], [1536, 1536], [576]], 30, (49152, 576)))
    print(f"memory read (bench's 256 MiB sum): {memory_rate(torch.device('cpu')) / 1e9:.1f} GB/s")


def step_rows(name: str, shapes: list, splits: list, layers: int, head: tuple[int, int]) -> str:
    """One line of `rows`: `layers` layers of the joined `shapes` (split into the modules' `splits`) and a head."""
    from locret_cli.runtime.native_rows import rows_product

    weights = [torch.randn(o, i, dtype=torch.bfloat16) for _ in range(layers) for o, i in shapes]
    weights.append(torch.randn(*head, dtype=torch.bfloat16))
    apart = [[p.contiguous() for p in w.split(split)] for w, split in zip(weights, splits * layers + [[head[0]]])]
    inputs = {i: torch.randn(1, i, dtype=torch.bfloat16) for _, i in shapes}
    packed_weights = [packed(w, 1) for w in weights]
    total = sum(w.numel() * 2 for w in weights)
    ways = (lambda: [F.linear(inputs[w.shape[1]], w) for w in weights],
            lambda: [packed_linear(inputs[w.shape[1]], p) for w, p in zip(weights, packed_weights)],
            lambda: [rows_product(inputs[p.shape[1]], p, None) for parts in apart for p in parts])
    took = [seconds(way, 10) for way in ways]
    packed_weights.clear(), apart.clear()
    int8 = [(torch.randint(-127, 128, w.shape, dtype=torch.int8), torch.rand(w.shape[0]).bfloat16()) for w in weights]
    int8_s = seconds(lambda: [torch._weight_int8pack_mm(inputs[q.shape[1]], q, scale) for q, scale in int8], 10)
    cells = [f"{1e3 * t:.1f} ms ({total / t / 1e9:.1f} GB/s)" for t in took]
    return (f"| {name} | {total / 2**30:.2f} GiB | " + " | ".join(cells) + f" | {took[2] / took[1]:.2f} | "
            f"{1e3 * int8_s:.1f} ms ({total / 2 / int8_s / 1e9:.1f} GB/s) |")


def int8_rows() -> None:
    """One decode step's linears of Qwen2.5-1.5B (the modules apart, as the model holds them), one row each, all
    distinct weights: rows in fp32 (a CPU computing in fp32) and bf16 (one computing in bf16), against weights in
    the compute dtype by F.linear, bf16 weights by locret's kernel, int8 weights with a scale per row by locret's
    kernel and by torch's `_weight_int8pack_mm`, and 4-bit weights (`--load-int4`'s packing, groups of 32) by
    torch's `_weight_int4pack_mm_for_cpu` (the row rounded to bf16 for it) and by locret's 4-bit kernel (a dash
    where this CPU lacks what it needs); the 4-bit bytes counted with the scales."""
    from locret_cli.runtime.int4_linear import GROUP, packing_block, quantize_groups
    from locret_cli.runtime.native_rows import int4_rows_product, int8_kernels, int8_rows_product, rows_product

    def four_bit(x, packed, scales_zeros):
        return int4_rows_product(x, packed, scales_zeros, packing_block())

    if int8_kernels() is None:
        raise SystemExit("locret's rows kernels are not built here (no AVX2 and FMA, or no C compiler)")
    splits = [[1536, 256, 256], [1536], [8960, 8960], [1536]]
    shapes = [(o, i) for (_, i), split in zip(QWEN15_LINEARS, splits) for o in split] * 28 + [(151936, 1536)]
    count = sum(o * i for o, i in shapes)
    print(f"| rows | weights in the compute dtype, F.linear | bf16, locret's kernel | int8, locret's kernel | "
          f"int8, `_weight_int8pack_mm` | 4-bit, `_weight_int4pack_mm_for_cpu` | 4-bit, locret's kernel | "
          f"({count / 1e9:.2f} G weights a step) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for dtype in (torch.float32, torch.bfloat16):
        inputs = {i: torch.randn(1, i, dtype=dtype) for _, i in shapes}
        cells = []
        for make, way in ((lambda o, i: (torch.randn(o, i, dtype=dtype),), F.linear),
                          (lambda o, i: (torch.randn(o, i, dtype=torch.bfloat16),),
                           lambda x, w: rows_product(x, w, None)),
                          (lambda o, i: (torch.randint(-127, 128, (o, i), dtype=torch.int8), torch.rand(o, dtype=dtype)),
                           lambda x, q, s: int8_rows_product(x, q, s, None)),
                          (lambda o, i: (torch.randint(-127, 128, (o, i), dtype=torch.int8), torch.rand(o, dtype=dtype)),
                           lambda x, q, s: torch._weight_int8pack_mm(x, q, s)),
                          (lambda o, i: quantize_groups(torch.randn(o, i, dtype=torch.bfloat16) * 0.02),
                           lambda x, p, sz: torch.ops.aten._weight_int4pack_mm_for_cpu(x.bfloat16(), p, GROUP, sz)),
                          (lambda o, i: quantize_groups(torch.randn(o, i, dtype=torch.bfloat16) * 0.02),
                           four_bit)):
            weights = [(i, make(o, i)) for o, i in shapes]  # by width: a 4-bit packing's rows are half as wide
            if way is four_bit and four_bit(inputs[1536], *weights[0][1]) is None:
                cells.append("-")
                continue
            took = seconds(lambda: [way(inputs[i], *w) for i, w in weights], 10)
            size = sum(t.numel() * t.element_size() for _, w in weights for t in w)
            cells.append(f"{1e3 * took:.1f} ms ({size / took / 1e9:.1f} GB/s)")
            weights.clear()
        print(f"| {str(dtype).removeprefix('torch.')} | " + " | ".join(cells) + " | |")
    print(f"memory read (bench's 256 MiB sum): {memory_rate(torch.device('cpu')) / 1e9:.1f} GB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("linear", "chain", "sdpa", "chunk", "one-query", "kernel-query", "rates",
                                          "rows", "int8-rows"))
    {"linear": linear, "chain": chain, "sdpa": sdpa, "chunk": chunk, "one-query": one_query,
     "kernel-query": kernel_query, "rates": rates, "rows": rows, "int8-rows": int8_rows}[parser.parse_args().which]()


if __name__ == "__main__":
    main()
