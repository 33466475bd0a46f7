"""LFM2-350M's exact shape (random weights, bf16): config folding, sharded loading, a forward step."""

from __future__ import annotations

import json

import pytest
import torch

from model.arch.cache import HybridCache
from model.arch.lfm2_config import ATTENTION, CONV, Lfm2Config
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.file_embedding import FileEmbedding
from model.checkpoint.loader import load_model
from model.checkpoint.weights import random_state_dict
from model.native import kernels
from model.native.linears import NativeLinear, PackedLinear, onednn_bf16_supported

# config.json of LiquidAI/LFM2-350M, as published (legacy field names included on purpose)
LFM2_350M = {
    "architectures": ["Lfm2ForCausalLM"],
    "block_auto_adjust_ff_dim": True,
    "block_dim": 1024,
    "block_ff_dim": 6656,
    "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256,
    "block_norm_eps": 1e-05,
    "bos_token_id": 1,
    "conv_L_cache": 3,
    "conv_bias": False,
    "eos_token_id": 7,
    "hidden_size": 1024,
    "layer_types": [
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
        "full_attention",
        "conv",
    ],
    "max_position_embeddings": 128000,
    "model_type": "lfm2",
    "norm_eps": 1e-05,
    "num_attention_heads": 16,
    "num_heads": 16,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "rope_theta": 1000000.0,
    "tie_embedding": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 65536,
}


def test_350m_config_and_parameter_count():
    config = Lfm2Config.from_dict(LFM2_350M)
    assert config.ffn_dim == 4608 and config.head_dim == 64
    assert len(config.layers_of_kind(ATTENTION)) == 6 and len(config.layers_of_kind(CONV)) == 10
    assert sum(torch.Size(s).numel() for s in config.expected_shapes().values()) == 354_483_968


def test_legacy_full_attn_idxs_is_folded_into_layer_types():
    raw = {k: v for k, v in LFM2_350M.items() if k != "layer_types"}
    raw["full_attn_idxs"] = [2, 5, 8, 10, 12, 14]
    assert Lfm2Config.from_dict(raw).layer_types == LFM2_350M["layer_types"]


@pytest.mark.slow
def test_350m_loads_from_shards_in_bf16_and_runs(tmp_path):
    from safetensors.torch import save_file

    config = Lfm2Config.from_dict(LFM2_350M)
    (tmp_path / "config.json").write_text(json.dumps(LFM2_350M))
    tensors = {k: v.to(torch.bfloat16) for k, v in random_state_dict(config).items()}
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, shard in shards.items():
        save_file({n: tensors[n] for n in shard}, tmp_path / file)
    weight_map = {n: file for file, shard in shards.items() for n in shard}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    del tensors

    model = load_model(tmp_path, dtype="bfloat16")
    packed = sum(b.numel() for b in model.buffers())  # repacked linear weights are buffers
    # bf16 on disk: where a faster kernel repacks the tied head, embedding rows are read from the
    # file's table; with neither native kernels nor oneDNN bf16 the head shares the in-memory table
    repacked = isinstance(model.lm_head, (NativeLinear, PackedLinear))
    assert repacked == (kernels.load() is not None or onednn_bf16_supported())
    assert isinstance(model.model.embed_tokens, FileEmbedding) == repacked
    assert sum(p.numel() for p in model.parameters()) + packed == 354_483_968
    cache = HybridCache(config, num_blocks=4, block_size=16, num_conv_rows=2, dtype=torch.bfloat16)
    batch = build_forward_batch([SequenceChunk(list(range(1, 40)), 0, [0, 1, 2], 0, 1)], 16, 3)
    logits = model(batch, cache)
    assert logits.shape == (1, 65536) and torch.isfinite(logits).all()
