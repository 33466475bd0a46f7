"""12-bit bf16 weights (model/quant/bf12.py, cpu_linear_bf12.cpp): the plain bf16 kernel's outputs
bit for bit, on every instruction set the CPU runs, at every batch size, whatever the weights'
distribution; exceptions exact; a weight with too many of them stays bf16."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from model.arch.cache import HybridCache
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.loader import load_model
from model.native.kernels.layout import PAIR, pack_panels
from model.native.linears import NativeLinear
from model.quant import bf12
from model.quant.bf12 import Bf12Linear, pack_bf12, packed_12bit

# 1-16 rows (one register tile decodes in registers; up to 16 rows on AVX512_BF16 tall tiles of part of
# a panel do too; more rows decode each k-chunk once) and past them
ROWS = [*range(1, 17), 33]
# (out, in): whole panels, a partial last panel, K not a multiple of the vectors' width
SHAPES = [(128, 256), (100, 192), (37, 68), (70, 640)]  # the last: k-chunks with exceptions in several


def normal_rows(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """Trained-shaped: normal rows with scales spread as a trained model's (0.005-0.08)."""
    scales = torch.exp(torch.empty(n, 1).uniform_(-5.3, -2.5, generator=generator))
    return torch.randn(n, k, generator=generator) * scales


def uniform(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """nn.Linear's initialisation: uniform in +-1/sqrt(k)."""
    return (torch.rand(n, k, generator=generator) * 2 - 1) / k**0.5


def many_exponents(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """Magnitudes spread over 2^-60..2^20, so every table misses many: exceptions everywhere."""
    magnitude = torch.exp2(torch.empty(n, k).uniform_(-60, 20, generator=generator))
    return magnitude * torch.randn(n, k, generator=generator).sign()


def specials(n: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """Normal rows sprinkled with zeros of both signs, subnormals, and values far from the rest."""
    weight = normal_rows(n, k, generator)
    picks = torch.randint(0, n * k, (max(4, n * k // 400),), generator=generator)
    odd = torch.tensor([0.0, -0.0, 1e-40, -3e-39, 3e38, -1e30, 1e-20])
    weight.view(-1)[picks] = odd[torch.arange(picks.numel()) % odd.numel()]
    return weight


DISTRIBUTIONS = {
    "normal_rows": normal_rows,
    "uniform": uniform,
    "many_exponents": many_exponents,
    "specials": specials,
}


def weight_of(distribution: str, n: int, k: int, seed: int = 0) -> torch.Tensor:
    return DISTRIBUTIONS[distribution](n, k, torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(
        a.view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32),
        b.view(torch.int16 if b.dtype == torch.bfloat16 else torch.int32),
    )


@pytest.mark.parametrize("distribution", list(DISTRIBUTIONS))
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_12bit_products_are_the_bf16_products_bit_for_bit(native, distribution, n, k):
    weight = weight_of(distribution, n, k)
    panels = pack_panels(weight, PAIR, native.PANEL)
    # packed, however many exceptions
    packed = pack_bf12(panels, native.BF12_BYTE_ORDER, native.BF12_NIBBLE_ORDER, limit=1.0)
    assert packed is not None
    if distribution in ("many_exponents", "specials"):
        assert packed.exceptions > 0
    operands = [getattr(packed, name) for name in bf12._OPERANDS["bf12"]]
    generator = torch.Generator().manual_seed(1)
    for m in ROWS:
        x = torch.randn(m, k, generator=generator).to(torch.bfloat16)
        assert same_bits(native.linear_bf12(x, *operands, n), native.linear_bf16(x, panels, n)), m
        out_12, out_16 = torch.empty(m, n), torch.empty(m, n)  # the head's fp32 outputs
        native.linear_bf12(x, *operands, n, out_12)
        native.linear_bf16(x, panels, n, out_16)
        assert same_bits(out_12, out_16), m


def test_12bit_products_split_between_threads_are_the_bf16_products_bit_for_bit(native):
    """The tests run on one thread; serving runs on all cores, where panels are split between
    threads and each decodes its k-chunks into a buffer of its own (shared, the rows would mix)."""
    weight = weight_of("specials", 512, 640)
    panels = pack_panels(weight, PAIR, native.PANEL)
    packed = pack_bf12(panels, native.BF12_BYTE_ORDER, native.BF12_NIBBLE_ORDER, limit=1.0)
    assert packed is not None
    operands = [getattr(packed, name) for name in bf12._OPERANDS["bf12"]]
    generator = torch.Generator().manual_seed(2)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for m in (3, 64, 200):
            x = torch.randn(m, 640, generator=generator).to(torch.bfloat16)
            assert same_bits(native.linear_bf12(x, *operands, 512), native.linear_bf16(x, panels, 512)), m
    finally:
        torch.set_num_threads(threads)


def test_trained_shaped_weights_take_12_bits_with_few_exceptions():
    weight = weight_of("normal_rows", 1024, 1024)
    packed = pack_bf12(pack_panels(weight, PAIR, 32), range(32), range(32))
    assert packed is not None
    assert packed.exceptions < weight.numel() * bf12.EXCEPTION_LIMIT
    stored = sum(t.nbytes for t in (packed.bytes, packed.nibbles, packed.tables, packed.starts))
    assert stored < weight.nbytes * 0.76  # 12 bits of 16, and the tables


def test_a_weight_with_too_many_exceptions_stays_bf16_with_the_same_outputs(native):
    linear = nn.Linear(256, 128, bias=False, dtype=torch.bfloat16)
    linear.weight.data = weight_of("many_exponents", 128, 256)
    layer = Bf12Linear(linear, native)
    assert layer.native_kind == "bf16" and not layer.in_12_bits
    x = torch.randn(3, 256).to(torch.bfloat16)
    assert same_bits(layer(x), NativeLinear(linear, native)(x))


def test_a_weight_under_the_limit_is_packed(native):
    linear = nn.Linear(256, 128, bias=False, dtype=torch.bfloat16)
    linear.weight.data = weight_of("normal_rows", 128, 256)
    layer = Bf12Linear(linear, native)
    assert layer.in_12_bits
    assert packed_12bit(nn.Sequential(layer, nn.Linear(4, 4))) == (1, 1)


def decode_logits(model: nn.Module, batch: int) -> list[torch.Tensor]:
    """Prefill ``batch`` prompts of different lengths, then three decode steps of all of them together:
    every step's logits. Sliding-window layers (LFM3) get a pool of their own, indexed alike."""
    block, window = 4, model.config.attention_window
    blocks = 8 * batch + 1
    cache = HybridCache(
        model.config, blocks, block, batch, model.dtype, num_sliding_blocks=blocks if window else 0
    )
    sequences = [[(7 * i + j) % 50 + 3 for j in range(2 + i % 5)] for i in range(batch)]
    tables = [list(range(1 + 8 * i, 9 + 8 * i)) for i in range(batch)]
    sliding = tables if window else [None] * batch
    steps = []
    chunks = [
        SequenceChunk(list(ids), 0, tables[i], i, i, sliding_table=sliding[i])
        for i, ids in enumerate(sequences)
    ]
    for _ in range(4):
        forward = build_forward_batch(
            chunks,
            block,
            model.config.conv_L_cache,
            row_query_limit=model.row_query_limit,
            sliding_window=window,
        )
        logits = model(forward, cache)
        steps.append(logits)
        for i, token in enumerate(logits.argmax(-1).tolist()):
            sequences[i].append(token)
        chunks = [
            SequenceChunk([ids[-1]], len(ids) - 1, tables[i], i, i, sliding_table=sliding[i])
            for i, ids in enumerate(sequences)
        ]
    return steps


@pytest.mark.parametrize("preset", ["default", "moe", "lfm3"])
def test_models_give_the_bf16_logits_in_12_bits(native_models, tiny_ckpt_factory, preset):
    """LFM2, LFM2-MoE and LFM3: the same logits bit for bit at batch sizes 1-16, exceptions included."""
    path = tiny_ckpt_factory(preset, dtype=torch.bfloat16)
    plain = load_model(path, dtype="bfloat16")
    twelve = load_model(path, dtype="bfloat16", weights_12bit=True)
    packed, total = packed_12bit(twelve)
    assert total > 0 and packed == total
    assert packed_12bit(plain) == (0, 0)
    for batch in range(1, 17):
        for step, (a, b) in enumerate(
            zip(decode_logits(twelve, batch), decode_logits(plain, batch), strict=True)
        ):
            assert same_bits(a, b), f"batch {batch}, step {step}"


def spread_exponents(checkpoint: Path, out: Path) -> Path:
    """A copy of ``checkpoint`` whose linear weights are each multiplied by a random power of two in
    2^-24..2^8: tables miss many exponents, and bf16 keeps every value exactly."""
    shutil.copytree(checkpoint, out)
    (weights,) = out.glob("*.safetensors")
    tensors = load_file(weights)
    generator = torch.Generator().manual_seed(0)
    for name, tensor in tensors.items():
        if tensor.dim() == 2 and "embed" not in name:
            powers = torch.randint(-24, 9, tensor.shape, generator=generator).to(torch.float32)
            tensors[name] = (tensor.float() * torch.exp2(powers)).to(tensor.dtype)
    save_file(tensors, weights, metadata={"format": "pt"})
    return out


def test_exceptions_in_a_model_keep_its_logits(native_models, tiny_ckpt_factory, monkeypatch, tmp_path: Path):
    """Weights spanning many exponents, packed anyway (no limit): exceptions in every layer, and
    still the bf16 logits."""
    path = spread_exponents(tiny_ckpt_factory("default", dtype=torch.bfloat16), tmp_path / "spread")
    plain = load_model(path, dtype="bfloat16")
    default = load_model(path, dtype="bfloat16", weights_12bit=True)
    # past the limit every spread weight stays bf16 (the head is the embedding table, not spread)
    assert [name for name, m in default.named_modules() if getattr(m, "in_12_bits", False)] == ["lm_head"]
    monkeypatch.setattr(bf12, "EXCEPTION_LIMIT", 1.0)
    twelve = load_model(path, dtype="bfloat16", weights_12bit=True, quantized_cache=tmp_path / "cache")
    layers = {name: m for name, m in twelve.named_modules() if isinstance(m, Bf12Linear)}
    assert all(layer.in_12_bits for layer in layers.values())
    assert all(layer.positions.numel() > 1 for name, layer in layers.items() if name != "lm_head")
    for batch in (1, 5, 16):
        for model in (twelve, default):
            for a, b in zip(decode_logits(model, batch), decode_logits(plain, batch), strict=True):
                assert same_bits(a, b), batch


def load_reporting(path: Path, cache: Path) -> tuple[nn.Module, list[str]]:
    """A 12-bit load and the stages it reported, in order, each once."""
    stages: list[str] = []
    model = load_model(
        path,
        "bfloat16",
        quantized_cache=cache,
        weights_12bit=True,
        progress=lambda stage, _: stages.append(stage),
    )
    return model, list(dict.fromkeys(stages))


def test_the_12bit_weights_are_cached_and_the_loading_stages_say_how_many(
    native_models, tiny_ckpt_factory, tmp_path: Path
):
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    runs = [load_reporting(path, tmp_path) for _ in range(2)]
    (first, made), (second, cached) = runs
    packed, total = packed_12bit(first)
    assert f"bf16 weights in 12 bits: {packed} of {total} tensors packed" in made
    assert "packing weights in 12 bits" in made and "packing weights in 12 bits" not in cached
    assert "loading cached 12-bit bf16 weights" in cached
    assert packed_12bit(second) == (packed, total)
    for a, b in zip(decode_logits(first, 3), decode_logits(second, 3), strict=True):
        assert same_bits(a, b)


def test_without_the_kernels_the_weights_stay_plain_bf16(tiny_ckpt_factory, monkeypatch):
    """The PyTorch fallback never takes the 12-bit form: its numbers are those of bf16 weights."""
    from model.native import kernels

    monkeypatch.setenv(kernels.DISABLE_ENV, "0")
    kernels.clear_cache()
    try:
        model = load_model(tiny_ckpt_factory("default", dtype=torch.bfloat16), "bfloat16", weights_12bit=True)
    finally:
        kernels.clear_cache()
    assert packed_12bit(model) == (0, 0)
