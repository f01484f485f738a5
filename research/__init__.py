"""Investigations: one-off diagnostics and their dated notes. Nothing in the package, recipes or benchmarks imports
them."""
