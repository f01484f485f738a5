"""The bounded KV cache: its layers, their buffers, and keys and values held in fewer bits."""
