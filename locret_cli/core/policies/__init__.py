"""Eviction policies, one small class each, in one registry: `POLICIES` by name, which `make_policy`, the bench and
the tests share. Their names, `POLICY_NAMES`, live in `settings.py`, which the command line reads without
importing torch."""

from __future__ import annotations

from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.attention import FinchPolicy, H2OPolicy, LazyLLMPolicy, SnapKVPolicy
from locret_cli.core.policies.base import Policy, select
from locret_cli.core.policies.full import FullPolicy
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.policies.simple import KNormPolicy, RandomPolicy
from locret_cli.core.policies.streaming import StreamingPolicy
from locret_cli.core.shape import ModelShape
from locret_cli.errors import LocretError
from locret_cli.settings import DEFAULT_POLICY, POLICY_NAMES

POLICIES: dict[str, type[Policy]] = {policy.name: policy for policy in (
    LocretPolicy, StreamingPolicy, H2OPolicy, SnapKVPolicy, LazyLLMPolicy, FinchPolicy, RandomPolicy, KNormPolicy,
    FullPolicy)}

__all__ = ["DEFAULT_POLICY", "POLICIES", "POLICY_NAMES", "Policy", "make_policy", "select"]


def make_policy(name: str, model, heads: RetainingHeads | None = None, **knobs) -> Policy:
    """The policy called `name` for `model`, built with the `knobs` it declares (locret: `score_pool`, the scores
    pooled over that many tokens; finch: `question_length`) and `heads` (locret needs them); others are ignored."""
    if name not in POLICIES:
        raise LocretError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    kind = POLICIES[name]
    return kind.build(ModelShape.from_config(model.config), heads,
                      **{knob: value for knob, value in knobs.items() if knob in kind.knobs})
