"""Checkpoint I/O: safetensors, the Hub, the loader, the quantized-weights cache.

``DTYPES`` is here, torch-free, so that the command line can offer them without importing torch
(engine/core/choices.py adds "auto"); the loader maps them to torch's.
"""

DTYPES = ("float32", "bfloat16")  # what a model loads in; fp16 on CPU is emulated and slow: not offered
