"""Eviction policies, one small class each. `make_policy` builds one by name."""

from __future__ import annotations

from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.attention import FinchPolicy, H2OPolicy, LazyLLMPolicy, SnapKVPolicy
from locret_cli.core.policies.base import Policy, select
from locret_cli.core.policies.full import FullPolicy
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.policies.simple import KNormPolicy, RandomPolicy
from locret_cli.core.policies.streaming import StreamingPolicy
from locret_cli.core.settings import POLICY_NAMES
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError, SettingError

__all__ = ["POLICY_NAMES", "Policy", "make_policy", "select"]


def make_policy(name: str, model, heads: RetainingHeads | None = None, score_pool: int = 1) -> Policy:
    """The policy called `name` for `model`; `locret` needs `heads`, and pools its scores over `score_pool`."""
    if name == "locret":
        if heads is None:
            raise SettingError("the locret policy needs retaining heads: pass {heads} DIR")
        return LocretPolicy(heads, score_pool)
    shape = ModelShape.from_config(model.config)
    if name == "streaming":
        return StreamingPolicy(shape.kv_heads)
    if name == "h2o":
        return H2OPolicy(shape.head_dim)
    if name == "snapkv":
        return SnapKVPolicy(shape.head_dim)
    if name == "lazyllm":
        return LazyLLMPolicy(shape.head_dim)
    if name == "finch":
        return FinchPolicy(shape.head_dim)
    if name == "random":
        return RandomPolicy(shape.kv_heads)
    if name == "knorm":
        return KNormPolicy(shape.head_dim)
    if name == "full":
        return FullPolicy()
    raise LocretError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
