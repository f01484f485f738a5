"""The attention sizes that heads, caches and memory plans depend on, read from a transformers config."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """The attention sizes heads depend on, read from a transformers config."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int

    @classmethod
    def from_config(cls, config) -> "ModelShape":
        config = config.get_text_config(decoder=True)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            layers=config.num_hidden_layers,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            hidden_size=config.hidden_size,
        )

    @property
    def qkv_width(self) -> int:
        """Width of one token's concatenated pre-RoPE q, k and v: (heads + 2 * kv_heads) * head_dim."""
        return (self.heads + 2 * self.kv_heads) * self.head_dim
