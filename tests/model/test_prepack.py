"""Pre-packed bf16 linears give exactly the logits of plain F.linear: a speed change only."""

from __future__ import annotations

import pytest
import torch

from model.batch import SequenceChunk, build_forward_batch
from model.cache import HybridCache
from model.config import Lfm2Config
from model.file_embedding import FileEmbedding
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


@pytest.mark.parametrize(
    ("preset", "stored_as"),
    [
        ("default", torch.float32),
        ("default", torch.bfloat16),
        ("attn_first", torch.float32),
        ("attn_first", torch.bfloat16),
    ],
)
def test_packed_bf16_model_matches_unpacked_bit_for_bit(tiny_ckpt_factory, preset, stored_as):
    path = tiny_ckpt_factory(preset, dtype=stored_as)
    packed = load_model(path, dtype="bfloat16")
    config = Lfm2Config.from_pretrained(path)
    plain = build_model(config, load_state_dict(path, config, torch.bfloat16))
    assert any(isinstance(m, PackedLinear) for m in packed.modules())
    # A tied head is packed only where embedding lookups can read the file's bf16 table instead;
    # otherwise it keeps sharing the one in-memory table. An untied head never needs the table.
    served_from_file = stored_as == torch.bfloat16
    assert isinstance(packed.lm_head, PackedLinear) == (served_from_file or not config.tie_word_embeddings)
    assert isinstance(packed.model.embed_tokens, FileEmbedding) == served_from_file
    ids = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    assert torch.equal(logits(packed, ids), logits(plain, ids))


def test_float32_is_left_unpacked(tiny_ckpt):
    assert not any(isinstance(m, PackedLinear) for m in load_model(tiny_ckpt, dtype="float32").modules())
