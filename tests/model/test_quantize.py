"""Quantized linears stay within a small multiple of bf16's own rounding error, on any shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model.arch.cache import HybridCache
from model.arch.registry import load_config
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.file_embedding import FileEmbedding
from model.checkpoint.loader import build_model, load_model
from model.checkpoint.weights import CheckpointTensors
from model.quant.apply import quantize_linears
from model.quant.int4 import Int4Linear
from model.quant.int8 import Int8Linear, W8A8Linear, quantize_rows


def all_logits(model, ids: list[int], dtype: torch.dtype) -> torch.Tensor:
    cache = HybridCache(model.config, num_blocks=8, block_size=16, num_conv_rows=2, dtype=dtype)
    batch = build_forward_batch([SequenceChunk(ids, 0, list(range(8)), 0, 1)], 16, model.config.conv_L_cache)
    batch.logits_index = torch.arange(len(ids))
    return model(batch, cache)


# Measured on the tiny presets against fp32: int8 1.0-2.1x bf16's error, w8a8 1.6-2.7x, int4 8.7-13.9x
# (4 bits: 16x int8's weight step, less the group scales' gain).
ERROR_MULTIPLE = {"int8": 3.0, "w8a8": 4.0, "int4": 20.0}
LAYER = {"int8": Int8Linear, "w8a8": W8A8Linear, "int4": Int4Linear}


@pytest.mark.parametrize("scheme", ["int8", "w8a8", "int4"])
@pytest.mark.parametrize("preset", ["default", "attn_first", "lfm2_like"])
def test_quantized_error_is_a_small_multiple_of_bf16_error(tiny_ckpt_factory, preset, scheme):
    path = tiny_ckpt_factory(preset)
    quantized = load_model(path, dtype="bfloat16", quantize=scheme)
    assert not any(isinstance(m, nn.Linear) for m in quantized.modules())
    assert any(isinstance(m, LAYER[scheme]) for m in quantized.modules())
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, quantized.config.vocab_size, (48,), generator=generator).tolist()
    exact = all_logits(load_model(path), ids, torch.float32)
    bf16_error = (all_logits(load_model(path, dtype="bfloat16"), ids, torch.bfloat16) - exact).abs().max()
    error = (all_logits(quantized, ids, torch.bfloat16) - exact).abs().max()
    assert error.item() <= ERROR_MULTIPLE[scheme] * bf16_error.item()


def test_row_quantization_round_trips_within_half_a_step():
    x = torch.randn(5, 40) * torch.tensor([0.01, 1.0, 100.0, 3.0, 0.5])[:, None]
    x[2, 7] = 0.0
    quantized, scales = quantize_rows(x)
    assert quantized.dtype == torch.int8 and quantized.abs().max() <= 127
    assert torch.all((quantized.float() * scales[:, None] - x).abs() <= scales[:, None] / 2 + 1e-6)
    assert torch.equal(quantize_rows(torch.zeros(2, 8))[0], torch.zeros(2, 8, dtype=torch.int8))
    # the textbook formula on the untouched input, value for value (as the native w8a8 kernels round)
    textbook_scales = x.abs().amax(dim=-1).clamp(min=1e-12) / 127.0
    assert torch.equal(scales, textbook_scales)
    assert torch.equal(quantized, torch.round(x / textbook_scales[:, None]).to(torch.int8))


@pytest.mark.parametrize("in_features", [16, 24, 19])  # 24 and 19 crash aten._weight_int8pack_mm
@pytest.mark.parametrize("scheme", ["int8", "w8a8"])
def test_any_width_is_close_to_the_float_product(scheme, in_features):
    torch.manual_seed(0)
    linear = nn.Linear(in_features, 37, bias=True).to(torch.bfloat16)
    x = torch.randn(3, 2, in_features, dtype=torch.bfloat16)
    out = LAYER[scheme](linear)(x)
    expected = F.linear(x.float(), linear.weight.float(), linear.bias.float())
    assert out.shape == (3, 2, 37) and out.dtype == torch.bfloat16
    assert (out.float() - expected).abs().max() <= 0.05 * expected.abs().max()


def test_w8a8_rows_are_independent_of_their_batch():
    """Per-token scales and exact int32 sums: a row's output never depends on its neighbours."""
    torch.manual_seed(0)
    layer = W8A8Linear(nn.Linear(64, 48, bias=False).to(torch.bfloat16))
    rows = torch.randn(9, 64, dtype=torch.bfloat16) * torch.logspace(-2, 2, 9)[:, None].to(torch.bfloat16)
    together = layer(rows)
    for i in range(len(rows)):
        assert torch.equal(layer(rows[i : i + 1]), together[i : i + 1])


def test_unknown_quantization_is_rejected(tiny_ckpt):
    with pytest.raises(ValueError, match="int3"):
        load_model(tiny_ckpt, quantize="int3")


def test_a_quantized_head_leaves_embedding_rows_in_the_file(tiny_ckpt_factory):
    """The int8 head is its own copy, so the bf16 table need not stay in memory as well."""
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    stored_bf16 = load_model(path, dtype="bfloat16", quantize="w8a8")
    assert isinstance(stored_bf16.model.embed_tokens, FileEmbedding)
    stored_fp32 = load_model(tiny_ckpt_factory("default"), dtype="bfloat16", quantize="w8a8")
    assert not isinstance(stored_fp32.model.embed_tokens, FileEmbedding)  # the file has no bf16 rows


def test_a_quantizing_load_converts_each_layer_before_it_reads_the_next(tiny_ckpt_factory):
    """The checkpoint's form of the weights exists one layer at a time (a bf16 8B MoE would not fit
    beside its int8 copy): every read but the first follows the conversion of what was read before."""
    path = tiny_ckpt_factory("lfm2_like", dtype=torch.bfloat16)
    config = load_config(path)
    checkpoint = CheckpointTensors(path, config)
    events: list[str] = []

    def read(names: list[str]) -> dict[str, torch.Tensor]:
        events.append("read")
        return checkpoint.read(names)

    def convert(module: nn.Module) -> None:
        events.append("convert")
        quantize_linears(module, "int8")

    model = build_model(config, read, torch.bfloat16, convert=convert)
    assert events == ["read", "convert"] * (config.num_hidden_layers + 1)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
