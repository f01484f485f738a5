"""Accuracy of SmolLM2-135M-Instruct with its shipped heads on the real-prose dev set."""
