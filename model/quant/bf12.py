"""Lossless 12-bit bf16 weights: the same numbers in 1.5 bytes a weight instead of 2.

Decode at a few rows is bound by the weight bytes each step reads. A trained model's bf16
exponents take few values, so each packed panel of model/native/kernels (32 or 64 outputs) gets a
table of its 15 commonest exponents, and each weight is stored as a byte of sign + 7 mantissa bits
and a 4-bit index into that table; index 15 marks an exception, whose exact bf16 is kept in a side
list. cpu_linear_bf12.cpp rebuilds the bf16 words in registers and runs linear_bf16's dot products
in linear_bf16's order: the outputs are bit for bit those of the bf16 weights, at every batch size.

A weight whose exceptions exceed ``EXCEPTION_LIMIT`` of its values stays in linear_bf16's panels
(each exception costs a scalar decode of its vector and 10 bytes of side list). Where the kernels
do not run, a model never takes this form: PyTorch multiplies the plain bf16 weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from model.native.kernels.layout import PAIR, native_width, pack_panels
from model.quant.linear import QuantizedLinear

EXCEPTION = 15  # the index that marks a value whose exponent is not in its panel's table
EXCEPTION_LIMIT = 1 / 1024  # of a weight's values; beyond it the weight stays bf16
# The kernels' instruction sets where 12-bit weights decode faster than bf16 ones (EngineConfig's
# "auto"): one stream much faster, and 8 streams and prompts not slower, end to end
# (`python -m bench.llamacpp_speed`, `python -m bench`; docs/PERFORMANCE.md has the figures).
# AVX512_BF16 ("avx512") is not there: from 8 rows its 12-bit kernel is still slower than plain bf16.
FASTER_ON: frozenset[str] = frozenset({"avx512f", "avx2"})
_VALUES_PER_CHUNK = 1 << 22  # values converted at once: int64 temporaries of a whole head would be ~4 GB


@dataclass(frozen=True, slots=True)
class Bf12Weight:
    """One weight's 12-bit form, in linear_bf12's operand order (cpu_linear_bf12.cpp has the layout)."""

    bytes: torch.Tensor  # u8 per value: sign << 7 | mantissa (each group in the kernels' order)
    nibbles: torch.Tensor  # u8 per two values: exponent indices (each group in the kernels' order), low first
    tables: torch.Tensor  # u8 [panels, 16]: exponents by index
    starts: torch.Tensor  # i64 [panels]: the first exception at or after the panel's first value
    positions: torch.Tensor  # i64 [exceptions + 1]: ascending, then int64 max
    values: torch.Tensor  # bf16 [exceptions + 1]

    @property
    def exceptions(self) -> int:
        return self.positions.numel() - 1


def pack_bf12(
    panels: torch.Tensor,
    byte_order: Sequence[int],
    nibble_order: Sequence[int],
    limit: float = EXCEPTION_LIMIT,
) -> Bf12Weight | None:
    """linear_bf16's packed weight [panels, ...] (bf16) in 12 bits, or None when more than ``limit``
    of its values would be exceptions. ``byte_order`` and ``nibble_order``: the kernels'
    ``BF12_BYTE_ORDER`` and ``BF12_NIBBLE_ORDER``, the value each stored byte and nibble of a group
    (the values one decode step rebuilds) holds, the order their decode reads them in."""
    count = panels.shape[0]
    words = panels.reshape(count, -1).view(torch.int16)
    per_panel = words.shape[1]
    step = max(1, _VALUES_PER_CHUNK // per_panel)
    order = (torch.tensor(byte_order), torch.tensor(nibble_order))
    parts = [_pack_chunk(words[start : start + step], *order) for start in range(0, count, step)]
    positions, values = [], []
    for start, (_, _, _, chunk_positions, chunk_values) in zip(range(0, count, step), parts, strict=True):
        positions.append(chunk_positions + start * per_panel)
        values.append(chunk_values)
    exceptions = sum(p.numel() for p in positions)
    if exceptions > limit * words.numel():
        return None
    flat_positions = torch.cat((*positions, torch.tensor([torch.iinfo(torch.int64).max])))
    panel_starts = torch.arange(count, dtype=torch.int64) * per_panel
    return Bf12Weight(
        bytes=torch.cat([part[0] for part in parts]).reshape(-1),
        nibbles=torch.cat([part[1] for part in parts]).reshape(-1),
        tables=torch.cat([part[2] for part in parts]),
        starts=torch.searchsorted(flat_positions, panel_starts),
        positions=flat_positions,
        values=torch.cat((*values, torch.zeros(1, dtype=torch.int16))).view(torch.bfloat16),
    )


def _pack_chunk(
    words: torch.Tensor, byte_order: torch.Tensor, nibble_order: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Panels of bf16 bits (int16 [n, values]) -> bytes, nibbles, tables, exception positions within
    the chunk (in value order), exception values (int16)."""
    n = words.shape[0]
    bits = words.to(torch.int32) & 0xFFFF
    exponents = (bits >> 7) & 0xFF
    rows = torch.arange(n).unsqueeze(1)
    counts = torch.bincount((rows * 256 + exponents).reshape(-1), minlength=n * 256).view(n, 256)
    # commonest first, ties to the lower exponent, so the table is the same on every machine
    ranked = (counts * 256 + (255 - torch.arange(256))).topk(EXCEPTION, dim=1).indices
    lookup = torch.full((n, 256), EXCEPTION, dtype=torch.int64)
    lookup.scatter_(1, ranked, torch.arange(EXCEPTION).expand(n, -1).contiguous())
    index = lookup.gather(1, exponents.to(torch.int64))
    missing = (index == EXCEPTION).reshape(-1)
    tables = torch.cat((ranked, torch.zeros(n, 1, dtype=torch.int64)), dim=1).to(torch.uint8)
    stored = ((bits >> 8) & 0x80) | (bits & 0x7F)
    group = byte_order.numel()
    stored = stored.view(n, -1, group)[:, :, byte_order].reshape(n, -1)
    index = index.view(n, -1, group)[:, :, nibble_order].reshape(n, -1)
    return (
        stored.to(torch.uint8),
        (index[:, 0::2] | (index[:, 1::2] << 4)).to(torch.uint8),
        tables,
        missing.nonzero().reshape(-1),
        words.reshape(-1)[missing],
    )


# The buffers each form's kernel reads, in its argument order.
_OPERANDS = {"bf12": tuple(field.name for field in fields(Bf12Weight)), "bf16": ("packed_weight",)}


class Bf12Linear(QuantizedLinear):
    """A bf16 linear layer the kernels multiply by in 12 bits (``native_kind`` "bf12"), or in
    linear_bf16's panels where too many of its exponents fall outside the tables ("bf16")."""

    weight: torch.Tensor  # a buffer, where the kernels do not run

    def __init__(self, linear: nn.Linear, kernels: ModuleType | None) -> None:
        weight = linear.weight.detach()
        runs_native = kernels is not None and native_width(linear.in_features)
        super().__init__(linear, kernels if runs_native else None)
        if kernels is None or not runs_native:
            self.native_kind = "bf16"
            self.register_buffer("weight", weight)
            return
        panels = pack_panels(weight.to(torch.bfloat16), PAIR, kernels.PANEL)
        packed = pack_bf12(panels, kernels.BF12_BYTE_ORDER, kernels.BF12_NIBBLE_ORDER, EXCEPTION_LIMIT)
        if packed is None:
            self.native_kind = "bf16"
            self.register_buffer("packed_weight", panels)
            return
        self.native_kind = "bf12"
        for name in _OPERANDS["bf12"]:
            self.register_buffer(name, getattr(packed, name))

    @property
    def in_12_bits(self) -> bool:
        return self.kernels is not None and self.native_kind == "bf12"

    def native_operands(self) -> list[torch.Tensor]:
        return [getattr(self, name) for name in _OPERANDS[self.native_kind]]

    def torch_matmul(self, flat: torch.Tensor) -> torch.Tensor:
        return F.linear(flat, self.weight.to(flat.dtype))


def packed_12bit(model: nn.Module) -> tuple[int, int]:
    """How many of ``model``'s 12-bit-capable linears hold their weight in 12 bits, and of how many."""
    layers = [module for module in model.modules() if isinstance(module, Bf12Linear)]
    return sum(layer.in_12_bits for layer in layers), len(layers)
