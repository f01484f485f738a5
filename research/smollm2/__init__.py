"""Diagnostics of SmolLM2-135M-Instruct reading through locret."""
