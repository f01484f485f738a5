"""A decode step compiled whole, gpt-fast's way, against the engine's shipped step, on this CPU.

    python -m research.cpu.static_decode --budget 1024 --steps 48 [--cpp-wrapper] [--no-freeze]

A random-weights model of the preset's shape reads a generated document until its cache holds budget + chunk
(`compiled_decode.read_engine`), then answers greedily twice from forks of that read:
- shipped: the engine's own decode step (packed one-row linears, locret's cache and attention);
- static: the kept entries copied once into static buffers with room for the answer, and one function over the
  model's own weights (embedding, norms as transformers computes them, projections, rotary, SDPA over the buffers
  with a mask of the slots filled, MLP, head), compiled by inductor with static shapes: the slot, the position and
  the buffers are tensors, so nothing recompiles from one step to the next.
Prints the compile time (the first step), tok/s over three runs of each, and whether the greedy tokens are the same.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from locret_cli.core.attention.over_cache import use_attention_kernel
from locret_cli.core.transformers_internals import decoder_functions
from locret_cli.models.arch import random_model
from locret_cli.runtime.native_attention import built_kernel
from locret_cli.runtime.packed_linear import pack_linears
from research.cpu.compiled_decode import read_engine


@torch.library.custom_op("locret_research::one_query", mutates_args=())
def one_query(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, filled: torch.Tensor,
              scale: float) -> torch.Tensor:
    """locret's AVX-512 BF16 kernel for one query per head over the first `filled` entries: (1, 1, heads, D)."""
    kernel = built_kernel()
    _, heads, _, dim = query.shape
    out = torch.empty(1, 1, heads, dim, dtype=torch.bfloat16)
    status = kernel.one_query(query.data_ptr(), query.stride(1), keys.data_ptr(), keys.stride(1), keys.stride(2),
                              values.data_ptr(), values.stride(1), values.stride(2), heads, heads // keys.shape[1],
                              int(filled), dim, scale, out.data_ptr(), out.stride(2))
    assert status == 0
    return out


@one_query.register_fake
def _(query, keys, values, filled, scale):
    return query.new_empty(1, 1, query.shape[1], query.shape[3])


class StaticDecoder(nn.Module):
    """Logits of one token over static key and value buffers (one pair per layer, (1, kv_heads, slots, head_dim)),
    written at `slot`; entries past `slot` are masked."""

    def __init__(self, model, attention: str = "native"):
        super().__init__()
        self.model, self.attention = model, attention
        layers = model.model.layers
        self.rotate = decoder_functions(layers[0].self_attn)[0]  # the modeling file's own RoPE
        # one weight for the linears that read one input, as the shipped step packs them
        self.qkv = nn.ParameterList([torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
                                     for a in (layer.self_attn for layer in layers)])
        self.gate_up = nn.ParameterList([torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])
                                         for layer in layers])
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

    def forward(self, token: torch.Tensor, position: torch.Tensor, slot: torch.Tensor,
                keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
        decoder = self.model.model
        hidden = decoder.embed_tokens(token.view(1, 1))
        cos, sin = decoder.rotary_emb(hidden, position_ids=position.view(1, 1))
        filled = (torch.arange(keys[0].shape[2]) <= slot).view(1, 1, 1, -1)
        sizes = (self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim)
        for layer, qkv, gate_up, k_buffer, v_buffer in zip(decoder.layers, self.qkv, self.gate_up, keys, values):
            attention = layer.self_attn
            x = layer.input_layernorm(hidden)
            q, k, v = F.linear(x, qkv).split(sizes, -1)
            q = q.view(1, 1, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(1, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(1, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self.rotate(q, k, cos, sin)
            k_buffer.index_copy_(2, slot.view(1), k)
            v_buffer.index_copy_(2, slot.view(1), v)
            if self.attention == "native":
                out = one_query(q.contiguous(), k_buffer, v_buffer, slot + 1, attention.scaling)
            else:
                out = F.scaled_dot_product_attention(q, k_buffer, v_buffer, attn_mask=filled,
                                                     scale=attention.scaling, enable_gqa=True).transpose(1, 2)
            hidden = hidden + F.linear(out.reshape(1, 1, -1), attention.o_proj.weight)
            x = layer.post_attention_layernorm(hidden)
            gate, up = F.linear(x, gate_up).chunk(2, -1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight)
        return self.model.lm_head(decoder.norm(hidden))[0, 0]


def static_buffers(engine, room: int) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """(keys, values, entries): the engine's kept entries copied into buffers with `room` free slots after them."""
    keys, values = [], []
    for layer in engine.cache.layers:
        k, v = layer.keys, layer.values
        batch, heads, n, dim = k.shape
        keys.append(torch.cat([k, k.new_zeros(batch, heads, room, dim)], dim=2))
        values.append(torch.cat([v, v.new_zeros(batch, heads, room, dim)], dim=2))
    return keys, values, n


def static_answer(step, engine, first: int, steps: int, room: int) -> list[int]:
    """Greedy tokens after `first`, `steps` of them, from a copy of the engine's read with `room` slots."""
    keys, values, entries = static_buffers(engine, room)
    position, token, tokens = engine.seen, first, []
    for index in range(steps):
        logits = step(torch.tensor([token]), torch.tensor(position + index), torch.tensor(entries + index), keys,
                      values)
        token = int(logits.argmax())
        tokens.append(token)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--cpp-wrapper", action="store_true", help="inductor's C++ wrapper (less Python per step)")
    parser.add_argument("--attention", choices=("native", "sdpa"), default="native")
    parser.add_argument("--no-freeze", action="store_true", help="leave the weights out of the graph's constants")
    args = parser.parse_args()
    import torch._inductor.config as inductor

    inductor.freezing = not args.no_freeze
    inductor.cpp_wrapper = args.cpp_wrapper
    model = random_model(args.preset, torch.bfloat16)
    engine, first = read_engine(model, args.budget, args.chunk, args.steps + 1)
    step = torch.compile(StaticDecoder(model, args.attention).eval(), fullgraph=True, dynamic=False)
    with torch.no_grad():
        started = time.perf_counter()
        static_answer(step, engine, first, 2, args.steps)
        compiled_s = time.perf_counter() - started
        static_rates, static_tokens = [], []
        for _ in range(3):
            started = time.perf_counter()
            static_tokens = static_answer(step, engine, first, args.steps, args.steps)
            static_rates.append(args.steps / (time.perf_counter() - started))
    pack_linears(model)
    use_attention_kernel(torch.bfloat16, built_kernel() if args.attention == "native" else None)
    shipped_rates, shipped_tokens = [], []
    for _ in range(3):
        fork = engine.fork()
        started = time.perf_counter()
        shipped_tokens = fork.decode(first)[0][1:]
        shipped_rates.append(len(shipped_tokens) / (time.perf_counter() - started))
    same = static_tokens == shipped_tokens[:args.steps]
    print(f"{args.preset}, budget {args.budget}, {args.attention} attention in both: static compiled "
          f"{compiled_s:.1f} s to compile, {max(static_rates):.1f} tok/s (runs "
          f"{', '.join(f'{r:.1f}' for r in static_rates)}); shipped step {max(shipped_rates):.1f} tok/s (runs "
          f"{', '.join(f'{r:.1f}' for r in shipped_rates)}); tokens {'the same' if same else 'DIFFERENT'}", flush=True)
    if not same:
        print("static ", static_tokens, "\nshipped", shipped_tokens)

if __name__ == "__main__":
    main()
