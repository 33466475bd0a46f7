"""The bitmask -> logits step (engine/structured/masks.py) against a bit-by-bit reading of llguidance's
layout (bit i of word w: token 32 w + i): disallowed ids become -inf, allowed ones keep their exact
value, and rows outside the constrained set are never touched."""

from __future__ import annotations

import numpy as np
import torch

from engine.structured.masks import GrammarMasks, PendingMasks, mask_biases

VOCAB = 1000  # not a multiple of 32: the last word's high bits lie past the vocabulary


def reference_allowed(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    words = bitmask.astype(np.int64) & 0xFFFFFFFF
    return np.array([[(row[i // 32] >> (i % 32)) & 1 == 1 for i in range(vocab)] for row in words])


def test_mask_biases_are_zero_where_allowed_and_minus_inf_elsewhere() -> None:
    rng = np.random.default_rng(0)
    bitmask = rng.integers(-(2**31), 2**31, size=(3, -(-VOCAB // 32)), dtype=np.int64).astype(np.int32)
    bitmask[1] = 0
    bitmask[2] = -1
    biases = mask_biases(bitmask, VOCAB)
    assert biases.shape == (3, VOCAB) and biases.dtype == np.float32
    np.testing.assert_array_equal(biases == 0, reference_allowed(bitmask, VOCAB))
    assert np.isneginf(biases[biases != 0]).all()


def test_apply_masks_only_the_constrained_rows_and_keeps_allowed_values_exact() -> None:
    rng = np.random.default_rng(1)
    bitmask = rng.integers(-(2**31), 2**31, size=(4, -(-VOCAB // 32)), dtype=np.int64).astype(np.int32)
    logits = torch.randn(4, VOCAB)
    before = logits.clone()
    GrammarMasks().apply(PendingMasks([0, 2], bitmask), logits)
    allowed = torch.from_numpy(reference_allowed(bitmask, VOCAB))
    for row in (0, 2):
        assert torch.equal(logits[row], torch.where(allowed[row], before[row], float("-inf")))
    assert torch.equal(logits[[1, 3]], before[[1, 3]])
