"""int4 linears: the stored format, the native kernel and the PyTorch fallback against a float64
product of the same int4 weights and int8 activations, on every instruction set the CPU runs."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from model.native import kernels
from model.native.kernels.layout import pack_int4_panels
from model.quant.int4 import (
    GROUP,
    Int4Linear,
    dequantize_int4,
    quantize_groups,
    quantize_int4,
)

# (N, K): partial panels; K a multiple of 32 but not of 64; groups not a multiple of the 8 per
# step (a partial last block); K not a multiple of 32 (padded), K below one group; LFM2's widths.
SHAPES = [(100, 64), (37, 96), (70, 288), (33, 800), (3, 12), (41, 50), (1000, 1024), (64, 4608)]


def bf16_linear(n: int, k: int, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(k, n, bias=False).to(torch.bfloat16)


def stored_weight(layer: Int4Linear) -> torch.Tensor:
    """The torch layer's int4 weight, dequantized to float64 [N, Kp]."""
    packed = layer.weight_int4  # [N, Kp / 2]: k even in the low nibble
    q = torch.stack((packed & 15, packed >> 4), dim=-1).view(len(packed), -1)
    return dequantize_int4(q, layer.codes, layer.steps).double()


def assert_matches_float_product(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> None:
    """``out`` (bf16) is the float64 product of the same int8 activations and int4 weights, up to
    fp32 sums over the groups and one bf16 rounding at the end."""
    a, scales = quantize_groups(x, weight.shape[1])
    m, groups = scales.shape
    terms = (a.double().view(m, 1, groups, GROUP) * weight.view(1, -1, groups, GROUP)).sum(-1)
    terms = terms * scales.double()[:, None, :]  # [M, N, groups]: each group's contribution
    exact = terms.sum(-1)
    fp32_sums = (groups + 4) * 2.0**-24 * terms.abs().sum(-1)
    assert torch.all((out.double() - exact).abs() <= 2.0**-8 * exact.abs() + 2 * fp32_sums)


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_native_int4_is_the_float_product_of_the_same_int4_weights(native, n, k):
    linear = bf16_linear(n, k)
    weight = stored_weight(Int4Linear(linear))  # quantizing is deterministic: the native layer's too
    layer = Int4Linear(linear, native)
    for m in (1, 3, 8, 17):
        x = torch.randn(m, k, dtype=torch.bfloat16) * torch.logspace(-2, 2, m)[:, None].to(torch.bfloat16)
        out = layer(x)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        assert_matches_float_product(out, x, weight)


@pytest.mark.parametrize(("n", "k"), SHAPES[:6])
def test_the_pytorch_fallback_is_the_same_float_product(n, k):
    layer = Int4Linear(bf16_linear(n, k, seed=1))
    x = torch.randn(2, 3, k, dtype=torch.bfloat16)
    out = layer(x)
    assert out.shape == (2, 3, n)
    assert_matches_float_product(out.view(6, n), x.view(6, k), stored_weight(layer))


def test_an_empty_batch_gives_an_empty_product(native):
    """A step whose chunks all skip sampling runs the head on no rows."""
    for kernels_or_none in (native, None):
        layer = Int4Linear(bf16_linear(40, 96), kernels_or_none)
        assert layer(torch.empty(0, 96, dtype=torch.bfloat16)).shape == (0, 40)


@pytest.mark.parametrize("panel", [32, 64])  # AVX2 / AVX-VNNI, AVX-512: checked here even where it cannot run
def test_the_packed_layout_is_the_one_the_kernel_reads(panel):
    """cpu_linear_int4.cpp reads, per panel and group, 4 vectors x 4 loads of panel bytes: in load t,
    lane l's 4 bytes hold output l's k = 4t..4t+3 in their low nibbles, 16+4t..16+4t+3 in the high."""
    n, kp = 2 * panel - 5, 96
    q = torch.randint(0, 16, (n, kp), dtype=torch.uint8, generator=torch.Generator().manual_seed(4))
    packed = pack_int4_panels(q, panel)
    lanes = panel // 4
    assert packed.shape == (2, kp // GROUP, panel * 16)
    stored = packed.tolist()
    for p, g, j, t, lane, byte in itertools.product(
        range(2), range(kp // GROUP), *[range(4)] * 2, range(lanes), range(4)
    ):
        value = stored[p][g][((j * 4 + t) * lanes + lane) * 4 + byte]
        row, k = p * panel + j * lanes + lane, g * GROUP + 4 * t + byte
        expected = (q[row, k].item(), q[row, k + 16].item()) if row < n else (0, 0)  # padding: zeros
        assert (value & 15, value >> 4) == expected


def test_a_row_gives_the_same_bits_alone_and_in_every_tile_size(native):
    """A row's sums take the same operations whether its tile holds 1, 2, 3 or 4 rows (decode,
    verify and batch steps): a token never depends on what else is in the step."""
    layer = Int4Linear(bf16_linear(300, 800, seed=4), native)
    x = torch.randn(9, 800, dtype=torch.bfloat16)
    alone = torch.cat([layer(x[row : row + 1]) for row in range(9)])
    for rows in range(2, 10):
        assert torch.equal(layer(x[:rows]), alone[:rows])


def test_every_instruction_set_gives_the_same_bits():
    """Exact integer sums, then the same fp32 operations per lane: AVX2, AVX-VNNI and AVX-512 agree."""
    builds = [kernels.load(isa) for isa in kernels.runnable_isas()]
    if len(builds) < 2:
        pytest.skip(f"this CPU runs {len(builds)} of the instruction sets; nothing to compare")
    linear = bf16_linear(300, 800, seed=2)
    x = torch.randn(7, 800, dtype=torch.bfloat16)
    first, *others = (Int4Linear(linear, build)(x) for build in builds)
    for out in others:
        assert torch.equal(out, first)


@pytest.mark.parametrize("kind", ["gaussian", "heavy-tailed", "degenerate"])
def test_int4_weights_stay_close_to_the_original(kind):
    torch.manual_seed(3)
    if kind == "gaussian":
        weight = torch.randn(256, 512) * 0.02
    elif kind == "heavy-tailed":  # Student's t with 3 degrees of freedom, columns of varied scale
        weight = torch.distributions.StudentT(3.0).sample((256, 512)) * torch.exp(torch.randn(512) * 0.5)
    else:  # zero rows, constant groups, all-positive and all-negative rows, a huge outlier
        weight = torch.randn(256, 512)
        weight[0] = 0
        weight[1] = 0.5
        weight[2] = weight[2].abs()
        weight[3] = -weight[3].abs()
        weight[4, 7] = 1e4
    q, codes, steps = quantize_int4(weight.to(torch.bfloat16))
    restored = dequantize_int4(q, codes, steps)
    assert q.max() <= 15 and torch.isfinite(restored).all()
    error = (restored - weight).norm(dim=1) / weight.norm(dim=1).clamp(min=1e-30)
    assert error.max() <= 0.15  # 4 bits: ~8% on Gaussian rows, ~10% heavy-tailed
    if kind == "degenerate":
        assert torch.equal(restored[0], torch.zeros(512))
        # the outlier's block shares one step per 256 values: its other groups still keep a grid
        levels = [restored[4, g * GROUP : (g + 1) * GROUP].unique().numel() for g in range(1, 8)]
        assert min(levels) > 1


def test_int4_rows_take_four_and_five_eighths_bits_a_weight(native):
    layer = Int4Linear(bf16_linear(native.PANEL * 3, 1024), native)
    stored = sum(b.numel() * b.element_size() for b in layer.buffers())
    assert stored * 8 == native.PANEL * 3 * 1024 * (4 + 16 / GROUP + 32 / 256)


def test_the_kernel_refuses_a_layout_it_was_not_given(native):
    outputs = native.PANEL + 8  # two panels on every instruction set, so one panel is too few
    layer = Int4Linear(bf16_linear(outputs, 96), native)
    args = (layer.packed_int4, layer.packed_codes, layer.packed_steps, outputs)
    with pytest.raises(RuntimeError, match="x has 160 columns, the int4 weight 96"):
        native.linear_int4(torch.randn(2, 160, dtype=torch.bfloat16), *args)
    x = torch.randn(2, 96, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="packed int4 weight"):
        native.linear_int4(x, layer.packed_int4[:1], *args[1:])
    with pytest.raises(RuntimeError, match="int4 steps"):
        native.linear_int4(x, *args[:2], layer.packed_steps.float(), outputs)
