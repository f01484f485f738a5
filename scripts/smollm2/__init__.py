"""Data, training recipe and evaluation for the retaining heads shipped for SmolLM2-135M-Instruct."""
