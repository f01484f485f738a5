"""The SmolLM2-135M-Instruct heads recipe: real-prose documents with facts, heads data, and training."""
