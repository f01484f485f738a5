"""The KV cache of the Gemma 3 shapes at a document length, by kind of layer, computed from the cache's layout (the
same functions `--json` and the memory check use, which the tests hold equal to what the engine holds):

    python -m benchmarks.gemma3.cache_memory --tokens 131072 --budget 16384 --chunk 3072

Rows: a cache where every layer holds every token (what a cache without windows would hold); the model's own cache
(sliding layers hold their window, global layers every token: transformers' and llama.cpp's); a cache where every
layer slides; locret's peak (global layers hold budget + chunk, sliding ones their window + chunk). Weights are made
on the meta device: nothing is allocated.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM

from locret_cli.core.measure import full_cache_kinds, plan_memory
from locret_cli.models.arch import preset_config
from locret_cli.units import human_bytes


def meta_model(preset: str):
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(preset_config(preset), dtype=torch.bfloat16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=131072)
    parser.add_argument("--budget", type=int, default=16384)
    parser.add_argument("--chunk", type=int, default=3072)
    parser.add_argument("--sizes", default="1b,4b,12b")
    args = parser.parse_args()
    print(f"| shape | every layer holds every token | the model's own cache | every layer slides | "
          f"locret at budget {args.budget:,} |")
    print("|---|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        mixed, everything = meta_model(f"gemma3-{size}"), meta_model(f"gemma3-{size}-global")
        window = mixed.config.sliding_window
        own = full_cache_kinds(mixed, args.tokens)
        every = full_cache_kinds(everything, args.tokens)["global"]
        slides = full_cache_kinds(everything, window)["global"]
        locret = plan_memory(mixed, args.budget + args.chunk, args.chunk, keys_move=True).cache_bytes
        print(f"| gemma3-{size} ({mixed.config.num_hidden_layers} layers, window {window:,}) | {human_bytes(every)} | "
              f"{human_bytes(sum(own.values()))} | {human_bytes(slides)} | {human_bytes(locret)} |")


if __name__ == "__main__":
    main()
