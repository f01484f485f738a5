"""Where models come from beyond a Hub id or a directory: GGUF files, short names for known models, and the heads
locret ships for them (found by the model's identity, whatever its quantization)."""
