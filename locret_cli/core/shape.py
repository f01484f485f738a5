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


FULL, SLIDING = "full_attention", "sliding_attention"  # the layer kinds of `config.layer_types`


def layer_windows(config) -> list[int | None]:
    """Each layer's sliding window, or None where it attends to all earlier tokens: from `config.layer_types`
    (Gemma 3: "sliding_attention" or "full_attention"), else every layer slides when `sliding_window` is set."""
    text = config.get_text_config(decoder=True)
    window = getattr(text, "sliding_window", None)
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return [window if kind == SLIDING else None for kind in layer_types]
    return [window] * text.num_hidden_layers
