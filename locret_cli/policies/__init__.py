"""Eviction policies, one small class each. `make_policy` builds one by name."""

from __future__ import annotations

from locret_cli.errors import LocretError
from locret_cli.heads import ModelShape, RetainingHeads
from locret_cli.policies.base import Policy, select
from locret_cli.policies.full import FullPolicy
from locret_cli.policies.locret import LocretPolicy
from locret_cli.policies.streaming import StreamingPolicy

POLICY_NAMES = ("locret", "streaming", "full")

__all__ = ["POLICY_NAMES", "Policy", "make_policy", "select"]


def make_policy(name: str, model, heads: RetainingHeads | None = None) -> Policy:
    """The policy called `name` for `model`; `locret` needs `heads`."""
    if name == "locret":
        if heads is None:
            raise LocretError("the locret policy needs retaining heads: pass --heads DIR")
        return LocretPolicy(heads)
    if name == "streaming":
        return StreamingPolicy(ModelShape.from_config(model.config).kv_heads)
    if name == "full":
        return FullPolicy()
    raise LocretError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
