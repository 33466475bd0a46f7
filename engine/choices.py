"""The values a user picks for the engine, torch-free so the command line can offer them."""

from model.quant import QUANTIZATIONS

DTYPES = ("auto", "float32", "bfloat16")  # fp16 on CPU is emulated and slow: not offered
ENGINE_DTYPES = DTYPES[1:]  # what "auto" resolves to
SPECULATIVE = ("ngram", "off")  # n-gram (prompt-lookup) drafts verified in the batch, or none
DEFAULT_SPECULATIVE = "ngram"

__all__ = ["DEFAULT_SPECULATIVE", "DTYPES", "ENGINE_DTYPES", "QUANTIZATIONS", "SPECULATIVE"]
