"""Pre-packed bf16 linears give exactly the logits of plain F.linear: a speed change only."""

from __future__ import annotations

import pytest
import torch

from model.batch import SequenceChunk, build_forward_batch
from model.cache import HybridCache
from model.config import Lfm2Config
from model.loader import build_model, load_model
from model.prepack import PackedLinear, can_prepack
from model.weights import load_state_dict

pytestmark = pytest.mark.skipif(not can_prepack(torch.bfloat16, "cpu"), reason="torch built without oneDNN")


def logits(model, ids: list[int]) -> torch.Tensor:
    cache = HybridCache(model.config, num_blocks=8, block_size=16, num_conv_rows=4, dtype=torch.bfloat16)
    prompt = build_forward_batch([SequenceChunk(ids, 0, list(range(8)), 0, 1)], 16, model.config.conv_L_cache)
    prompt.logits_index = torch.arange(len(ids))
    decode = build_forward_batch([SequenceChunk([ids[0]], len(ids), list(range(8)), 1, 1)], 16, 3)
    return torch.cat((model(prompt, cache), model(decode, cache)))


@pytest.mark.parametrize("preset", ["default", "attn_first"])
def test_packed_bf16_model_matches_unpacked_bit_for_bit(tiny_ckpt_factory, preset):
    path = tiny_ckpt_factory(preset)
    packed = load_model(path, dtype="bfloat16")
    config = Lfm2Config.from_pretrained(path)
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16))
    assert any(isinstance(m, PackedLinear) for m in packed.modules())
    # a tied head keeps sharing the embedding table instead of holding a packed copy
    assert isinstance(packed.lm_head, PackedLinear) != config.tie_word_embeddings
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(logits(packed, ids), logits(plain, ids))


def test_float32_is_left_unpacked(tiny_ckpt):
    assert not any(isinstance(m, PackedLinear) for m in load_model(tiny_ckpt, dtype="float32").modules())
