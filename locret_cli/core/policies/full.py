"""No eviction: the reference every other policy is measured against."""

from locret_cli.core.policies.base import Policy


class FullPolicy(Policy):
    """Keeps every entry; the cache grows with the document."""

    name = "full"
    evicts = False

    def score(self, layer_idx, q, k, v, token_index):
        raise AssertionError("the full policy never scores: nothing is evicted")
