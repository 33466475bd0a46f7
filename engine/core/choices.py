"""The values a user picks for the engine, torch-free so the command line can offer them."""

from model.checkpoint import DTYPES as ENGINE_DTYPES  # what "auto" resolves to
from model.quant import QUANTIZATIONS, WEIGHTS_12BIT

DTYPES = ("auto", *ENGINE_DTYPES)
SPECULATIVE = ("ngram", "off")  # n-gram (prompt-lookup) drafts verified in the batch, or none
DEFAULT_SPECULATIVE = "ngram"

__all__ = ["DEFAULT_SPECULATIVE", "DTYPES", "ENGINE_DTYPES", "QUANTIZATIONS", "SPECULATIVE", "WEIGHTS_12BIT"]
