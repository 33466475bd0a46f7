"""Liquid's models written from scratch (LFM2, LFM2.5, LFM2-MoE, LFM3) and everything about a checkpoint.

    arch/        one module per architecture and its config, over shared layers; registry.py keys
                 them by config.json's model_type
    native/      acceleration swapped in under the layers at load (accelerate.py): fused layers,
                 kernel linears, the decode stack, and the C++ kernels (one source per op)
    quant/       weight quantization: the scheme names (torch-free), one module per scheme
    checkpoint/  safetensors and their names on disk, the Hub, the loader, the quantized-weights cache
    text/        the tokenizer, the chat template (sandboxed, priced, in worker processes), the
                 model cards' sampling
    tiny/        tiny random checkpoints for tests and the offline --demo
    batch.py     a packed, ragged step's metadata; cache.py: the KV and conv-state tensors
    errors.py    the errors a user can act on

Nothing here imports engine/ or anything above it.
"""
