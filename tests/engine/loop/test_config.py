"""EngineConfig validation and how "auto" values resolve against a model and a machine."""

from __future__ import annotations

import pytest

from engine.core.config import EngineConfig, cpu_runs_bf16_fast, resolve_dtype
from model.arch.cache import HybridCache
from model.arch.lfm2_config import Lfm2Config
from model.native import kernels
from model.quant.bf12 import FASTER_ON

CONFIG = Lfm2Config(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    layer_types=["conv", "full_attention"],
    max_position_embeddings=4096,
)


@pytest.mark.parametrize(
    ("flags", "expected"), [({"sse4_2", "avx512f"}, False), ({"avx2"}, False), (None, True)]
)
def test_auto_dtype_is_bf16_only_where_the_native_kernels_run(monkeypatch, flags, expected):
    """An old x86 or ARM CPU (or no compiler) would run bf16 on torch's slower matmuls: float32 there."""
    if flags is None:
        if not kernels.runnable_isas():
            pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    else:
        monkeypatch.setattr(kernels, "cpu_flags", lambda: frozenset(flags))
    kernels.clear_cache()
    try:
        assert resolve_dtype("auto", "cpu") == ("bfloat16" if expected else "float32")
        assert cpu_runs_bf16_fast() is expected
    finally:
        kernels.clear_cache()


def test_auto_dtype_is_bf16_on_cuda_and_explicit_dtypes_are_kept():
    assert resolve_dtype("auto", "cuda:0") == "bfloat16"
    assert resolve_dtype("float32", "cuda") == "float32"
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if cpu_runs_bf16_fast() else "float32")


def test_cache_size_follows_the_memory_budget():
    config = EngineConfig(dtype="float32", kv_cache_memory_mb=1).resolve(CONFIG)
    per_block = HybridCache.bytes_per_block(CONFIG, 16, config.torch_dtype)
    assert config.num_kv_blocks == 2**20 // per_block


def test_max_model_len_is_capped_by_positions_and_by_the_pool():
    assert EngineConfig(dtype="float32", num_kv_blocks=1000).resolve(CONFIG).max_model_len == 4096
    assert EngineConfig(dtype="float32", num_kv_blocks=10).resolve(CONFIG).max_model_len == 160
    assert EngineConfig(dtype="float32", max_model_len=100).resolve(CONFIG).max_model_len == 100


@pytest.mark.parametrize(
    "fields",
    [
        {"dtype": "float16"},
        {"max_num_seqs": 0},
        {"num_kv_blocks": 0},
        {"max_num_seqs": 8, "max_num_batched_tokens": 4},
    ],
)
def test_invalid_settings_are_rejected(fields):
    with pytest.raises(ValueError, match="EngineConfig"):
        EngineConfig(**fields)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"weights_12bit": "off"}, "off"),
        ({"weights_12bit": "on", "quantize": "int8"}, "off"),  # int8 weights are not bf16
        ({"weights_12bit": "on", "dtype": "float32"}, "off"),
        ({"weights_12bit": "on"}, "on"),
    ],
)
def test_12bit_weights_resolve_on_only_for_a_bf16_model_on_the_kernels(fields, expected):
    if expected == "on" and not kernels.runnable_isas():
        pytest.skip(f"native CPU kernels cannot run on this machine: {kernels.unavailable_reason()}")
    assert EngineConfig(**{"dtype": "bfloat16", **fields}).resolve(CONFIG).weights_12bit == expected


@pytest.mark.parametrize("isa", list(kernels.ISAS))
def test_auto_turns_12bit_weights_on_exactly_where_they_measured_faster(monkeypatch, isa):
    """The default ("auto") follows the kernels' instruction set (forced, as a narrower CPU would
    choose it): on for those in FASTER_ON only."""
    monkeypatch.setenv(kernels.ISA_ENV, isa)
    expected = "on" if isa in FASTER_ON else "off"
    assert EngineConfig(dtype="bfloat16").resolve(CONFIG).weights_12bit == expected
    assert set(kernels.ISAS) >= FASTER_ON


def test_12bit_weights_take_only_auto_on_or_off():
    with pytest.raises(ValueError, match=r"EngineConfig\.weights_12bit must be one of auto, on, off"):
        EngineConfig(weights_12bit="yes")
