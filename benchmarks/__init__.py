"""Benchmarks: the scripts behind every figure in `docs/` (accuracy on the dev sets, speed, memory, kvpress side by
side). They import the package and the recipes' data generators; the package never imports them."""
