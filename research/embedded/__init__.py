"""Diagnostics of the embedded demo model: what its labels and heads rank above the kept threshold."""
