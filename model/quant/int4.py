"""Opt-in int4 linear layers (``--quantize int4``): half of int8's weight bytes per decode step.

Format, per output row n, with K padded with zeros to a multiple of GROUP (32):

    w[n, k] ~= scale[n, g] * q[n, k] - minimum[n, g]      q in [0, 15], g = k // 32
    scale[n, g] = step[n, g // 8] * code[n, g]            code: uint8, step: bf16 (one per 256 k)

and the minimum likewise (its own codes and steps), so 4 + 16/32 + 32/256 = 4.625 bits a weight.
Why this shape (docs/ARCHITECTURE.md has the figures): groups of 32 beat 64 clearly; a minimum
per group cuts the weight error by 9% on Gaussian and ~20% on heavy-tailed weights against a
symmetric scale; 8-bit codes under a bf16 step per 256 lose nothing against a bf16 scale and
minimum per group, which would cost 5 bits a weight; one least-squares refit of each group's
scale and minimum takes another ~4% off.

Activations are quantized too, per row and group of 32 (int8, ``quantize_groups``), so the
native kernels multiply integers (model/native/kernels/cpu_linear_int4.cpp). Without them (another
CPU, float32, LFM_CHAT_NATIVE_KERNELS=0) PyTorch computes the same integer sums and scales:
much slower, the same values up to fp32 rounding, and batch-invariant too.
"""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from model.native.kernels.layout import pack_int4_panels, panel_vectors
from model.quant.linear import QuantizedLinear

GROUP = 32  # k values per scale and minimum
BLOCK = 8  # groups per bf16 step
LEVELS = 15  # q in [0, LEVELS]
CODE_MAX = 255
REFITS = 1  # least-squares refits of each group's scale and minimum
_CHUNK_VALUES = 1 << 18  # weights quantized at a time: 1 MB fp32 buffers, kept in cache


class Int4Weights(NamedTuple):
    """A quantized weight, row-major: q [N, Kp] uint8; codes [N, groups, 2] uint8 and steps
    [N, blocks, 2] bf16, index 0 for the scale and 1 for the minimum."""

    q: torch.Tensor
    codes: torch.Tensor
    steps: torch.Tensor


def padded_width(in_features: int) -> int:
    """K padded with zeros to whole groups (zero weights times zero activations)."""
    return -(-in_features // GROUP) * GROUP


def _step_codes(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Non-negative per-group values [n, groups] -> uint8 codes, bf16 steps [n, blocks], code * step (fp32).

    A non-zero value keeps a code of at least 1: a group whose range is a sliver of its block's
    largest keeps a coarse grid rather than collapsing to one value.
    """
    n, groups = values.shape
    blocks = -(-groups // BLOCK)
    largest = F.pad(values, (0, blocks * BLOCK - groups)).view(n, blocks, BLOCK).amax(-1)
    steps = (largest / (CODE_MAX - 1)).to(torch.bfloat16)  # 254: a step rounded down still fits 255
    per_group = steps.float().repeat_interleave(BLOCK, dim=1)[:, :groups]
    codes = (values / per_group).nan_to_num_(0.0, posinf=0.0).round_().clamp_(0, CODE_MAX)
    codes = torch.where((codes == 0) & (values > 0) & (per_group > 0), 1.0, codes)
    return codes.to(torch.uint8), steps, per_group.mul_(codes)


def _quantize_chunk(
    grouped: torch.Tensor, q: torch.Tensor, work: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 weights ``grouped`` [n, 32, groups] (k = 32 * group + the middle index) -> q written
    into ``q`` (fp32, same layout; ``work``: scratch of that shape), codes [n, groups, 2] and
    steps [n, blocks, 2].

    Each group's values are strided by the number of groups, so every per-group value broadcasts
    along a contiguous inner dimension, where torch's loops vectorize: laid out [n, groups, 32],
    the reductions and broadcasts ran 2-4x slower.
    """
    low, high = grouped.amin(1).clamp_(max=0), grouped.amax(1).clamp_(min=0)
    scale, minimum = (high - low) / LEVELS, low.neg_()
    w_sum = grouped.sum(1)
    for refit in range(REFITS + 1):
        scale_codes, scale_steps, scale_values = _step_codes(scale)
        min_codes, min_steps, min_values = _step_codes(minimum)
        inverse = torch.where(scale_values > 0, 1 / scale_values, 0.0)
        torch.addcmul((min_values * inverse)[:, None], grouped, inverse[:, None], out=q)
        q.round_().clamp_(0, LEVELS)
        if refit == REFITS:
            break
        # least squares for this q: scale * q - minimum ~= w over each group
        q_sum = q.sum(1)
        variance = torch.mul(q, q, out=work).sum(1) - q_sum * q_sum / GROUP
        covariance = torch.mul(q, grouped, out=work).sum(1) - q_sum * w_sum / GROUP
        scale = torch.where(variance > 0, covariance / variance, scale).clamp_(min=0)
        minimum = ((scale * q_sum - w_sum) / GROUP).clamp_(min=0)
    return torch.stack((scale_codes, min_codes), dim=-1), torch.stack((scale_steps, min_steps), dim=-1)


def quantize_int4(weight: torch.Tensor) -> Int4Weights:
    """A weight [N, K] in this module's int4 format, a few rows at a time.

    The chunks' fp32 buffers are allocated once and reused: at 4 MB each, fresh temporaries are
    fresh mappings (model/memory.py's threshold), page-faulted on every write, which made
    quantizing ~2x slower.
    """
    n, k = weight.shape
    kp = padded_width(k)
    groups, blocks = kp // GROUP, -(-kp // (GROUP * BLOCK))
    device = weight.device
    out = Int4Weights(
        torch.empty(n, kp, dtype=torch.uint8, device=device),
        torch.empty(n, groups, 2, dtype=torch.uint8, device=device),
        torch.empty(n, blocks, 2, dtype=torch.bfloat16, device=device),
    )
    rows = max(1, min(n, _CHUNK_VALUES // kp))
    buffers = torch.empty(3, rows, GROUP, groups, device=device)
    for start in range(0, n, rows):
        chunk = slice(start, start + rows)
        part = F.pad(weight[chunk], (0, kp - k))
        grouped, q, work = (buffer[: len(part)] for buffer in buffers)
        grouped.copy_(part.view(len(part), groups, GROUP).transpose(1, 2))  # converts and transposes at once
        out.codes[chunk], out.steps[chunk] = _quantize_chunk(grouped, q, work)
        out.q[chunk].view(len(part), groups, GROUP).transpose(1, 2).copy_(q)
    return out


def group_values(codes: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """codes [n, groups, 2], steps [n, blocks, 2] -> fp32 [n, groups, 2]: each group's scale and minimum."""
    return steps.float().repeat_interleave(BLOCK, dim=1)[:, : codes.shape[1]] * codes.float()


def dequantize_int4(q: torch.Tensor, codes: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Row-major q [n, Kp], codes, steps -> fp32 weights [n, Kp] (scale * q - minimum per group)."""
    n, groups = codes.shape[:2]
    values = group_values(codes, steps)
    grouped = q.view(n, groups, GROUP).float() * values[..., 0, None] - values[..., 1, None]
    return grouped.view(n, groups * GROUP)


def quantize_groups(x: torch.Tensor, padded: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations [M, K] -> whole numbers a in [-127, 127] (fp32) [M, padded] and scales [M, groups]:
    x ~= a * scale per row and group of 32, as cpu_linear_int4.cpp quantizes them (same rounding)."""
    grouped = F.pad(x.float(), (0, padded - x.shape[-1])).view(x.shape[0], padded // GROUP, GROUP)
    scales = grouped.abs().amax(-1).clamp(min=1e-12) / 127.0
    return torch.round(grouped / scales[..., None]).view(x.shape[0], padded), scales


class Int4Linear(QuantizedLinear):
    """int4 weights (module docstring) times per-group int8 activations.

    Buffers: with kernels, ``packed_int4`` uint8 [panels, groups, PANEL * 16], ``packed_codes``
    uint8 [panels, groups, 2, PANEL], ``packed_steps`` bf16 [panels, blocks, 2, PANEL] (PANEL is
    the build's, so this layout belongs to one instruction set's width); without, ``weight_int4``
    uint8 [N, Kp / 2] (k even in the low nibble), ``codes`` [N, groups, 2], ``steps`` [N, blocks, 2].
    """

    native_kind = "int4"
    packed_int4: torch.Tensor
    packed_codes: torch.Tensor
    packed_steps: torch.Tensor
    weight_int4: torch.Tensor
    codes: torch.Tensor
    steps: torch.Tensor

    _CHUNK_VALUES = 1 << 22  # PyTorch path: fp32 temporaries of 16 MB at most (outputs at a time)

    def __init__(self, linear: nn.Linear, kernels: ModuleType | None = None) -> None:
        super().__init__(linear, kernels)
        q, codes, steps = quantize_int4(linear.weight.detach())
        self.padded_in_features = q.shape[1]
        if kernels is None:
            self.register_buffer("weight_int4", q[:, 0::2] | (q[:, 1::2] << 4))
            self.register_buffer("codes", codes)
            self.register_buffer("steps", steps)
        else:
            self.register_buffer("packed_int4", pack_int4_panels(q, kernels.PANEL))
            self.register_buffer("packed_codes", panel_vectors(codes, kernels.PANEL))
            self.register_buffer("packed_steps", panel_vectors(steps, kernels.PANEL))

    def native_operands(self) -> list[torch.Tensor]:
        return [self.packed_int4, self.packed_codes, self.packed_steps]

    def torch_matmul(self, flat: torch.Tensor) -> torch.Tensor:
        """The kernel's sum by PyTorch ops: exact integer sums per group (whole numbers below 2^16,
        exact in fp32 whatever the order), then each group's scales, then a sum over the groups
        along a contiguous last dimension, in an order that depends on no other row of the batch."""
        a, scales = quantize_groups(flat, self.padded_in_features)
        m, groups = scales.shape
        a = a.view(m, groups, GROUP // 2, 2)
        a_sums = a.sum((-1, -2))
        # a byte's low nibble is an even k, its high nibble the odd k after it: two products
        even, odd = (a[..., i].permute(1, 2, 0) for i in (0, 1))  # [groups, 16, M]
        out = torch.empty(m, self.out_features, dtype=torch.float32, device=flat.device)
        per_chunk = max(1, self._CHUNK_VALUES // max(m * groups, self.padded_in_features))
        for start in range(0, self.out_features, per_chunk):
            rows = slice(start, start + per_chunk)
            packed = self.weight_int4[rows].view(-1, groups, GROUP // 2).transpose(0, 1).contiguous()
            low, high = (packed & 15).float(), (packed >> 4).float()  # [groups, rows, 16]
            sums = torch.bmm(low, even).add_(torch.bmm(high, odd))  # [groups, rows, M], exact
            values = group_values(self.codes[rows], self.steps[rows])
            parts = sums.permute(2, 1, 0).contiguous() * values[..., 0] - a_sums[:, None] * values[..., 1]
            out[:, rows] = (parts * scales[:, None]).sum(-1)
        return out.to(flat.dtype)
