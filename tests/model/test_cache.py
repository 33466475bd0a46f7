"""The cache pool costs memory only for what is written, and reads as zeros until then."""

from __future__ import annotations

import torch

from model.arch.cache import HybridCache
from model.arch.lfm2_config import Lfm2Config


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def test_a_large_pool_is_not_resident_until_written():
    config = Lfm2Config(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        layer_types=["conv", "full_attention"] * 2,
        vocab_size=64,
    )
    before = resident_mb()
    cache = HybridCache(config, num_blocks=8192, block_size=16, num_conv_rows=8192, dtype=torch.float32)
    assert cache.nbytes > 512 * 2**20
    assert resident_mb() - before < 64
    assert cache.k[0][12345].abs().sum().item() == 0 and cache.conv[1][HybridCache.ZERO_ROW].abs().sum() == 0
    cache.k[0][:1000] = 1.0
    assert cache.k[0][:1000].sum().item() == 1000 * 4 * 64
