"""Attention over the cache: q, k and v captured per layer, rotary positions, attention observed for policies, and
attention over the kept entries without a mask."""
