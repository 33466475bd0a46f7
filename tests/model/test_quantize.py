"""Weight-only int8 stays within a small multiple of bf16's own rounding error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from model.batch import SequenceChunk, build_forward_batch
from model.cache import HybridCache
from model.loader import load_model
from model.quantize import Int8Linear


def all_logits(model, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    cache = HybridCache(model.config, num_blocks=8, block_size=16, num_conv_rows=2, dtype=dtype)
    batch = build_forward_batch([SequenceChunk(ids, 0, list(range(8)), 0, 1)], 16, model.config.conv_L_cache)
    batch.logits_index = torch.arange(len(ids))
    return model(batch, cache)


@pytest.mark.parametrize("preset", ["default", "attn_first", "lfm2_like"])
def test_int8_error_is_a_small_multiple_of_bf16_error(tiny_ckpt_factory, preset):
    """Measured on the tiny presets: int8 error is 1.3-2.3x bf16's, both against fp32."""
    path = tiny_ckpt_factory(preset)
    int8 = load_model(path, dtype="bfloat16", quantize="int8")
    assert not any(isinstance(m, nn.Linear) for m in int8.modules())
    assert any(isinstance(m, Int8Linear) for m in int8.modules())
    ids = torch.randint(0, int8.config.vocab_size, (48,), generator=torch.Generator().manual_seed(0)).tolist()
    exact = all_logits(load_model(path), ids, torch.float32)
    bf16_error = (all_logits(load_model(path, dtype="bfloat16"), ids, torch.bfloat16) - exact).abs().max()
    int8_error = (all_logits(int8, ids, torch.bfloat16) - exact).abs().max()
    assert int8_error.item() <= 3 * bf16_error.item()


def test_unknown_quantization_is_rejected(tiny_ckpt):
    with pytest.raises(ValueError, match="int4"):
        load_model(tiny_ckpt, quantize="int4")
