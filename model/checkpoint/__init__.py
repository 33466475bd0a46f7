"""Checkpoint I/O: safetensors, the Hub, the loader, the quantized-weights cache."""
