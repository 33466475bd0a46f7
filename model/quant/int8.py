"""Opt-in int8 linear layers, for faster decode on CPU at some cost in accuracy.

Decode at small batch is bound by the weight bytes each step reads; int8 halves them against
bf16. Weights are int8 rows times a per-output-channel scale (symmetric), so no calibration
data is needed. Two ways to multiply them:

- ``int8`` (weight-only): activations stay in the model dtype and ``aten._weight_int8pack_mm``
  dequantizes on the fly. Closest to bf16, but the kernel converts every weight to float, which
  makes it compute-bound: on a 2-core AVX512 Xeon it read weights at ~12 GB/s.
- ``w8a8``: each activation row is quantized to int8 with its own scale too (per token, at
  run time), and ``torch._int_mm`` multiplies int8 by int8 into exact int32 with VNNI. That
  kernel streams weights ~1.5x faster at one row and is 2-4x faster at 8-32 rows. A row's
  result depends only on that row (exact integer sums), so batches stay invariant.

With model/native/kernels built (bf16 activations on CPU, AVX-512 or AVX2), both run in its native
loops instead, at every batch size: they stream the int8 weights at close to memory bandwidth
at one row and outpace torch's kernels at prefill sizes too. The native w8a8 gives torch's result bit for bit
(same row quantization, exact integer sums). Only the packed weight is kept then.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from model.native.kernels.layout import PAIR, QUAD, native_width, pack_panels, pad_outputs
from model.quant.linear import QuantizedLinear

# aten._weight_int8pack_mm crashes (SIGSEGV) on CPU when the input width is not a multiple of 16.
_INT8PACK_K_MULTIPLE = 16


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``x ~= q * scale[:, None]``, scale as fp32.

    In place on one fp32 copy, with the row's largest magnitude from aminmax: the same values as
    ``round(x / (abs(x).amax() / 127))`` in two passes over memory fewer, 1.2-1.4x faster when
    quantizing a 350M model's weights at load.
    """
    x32 = x.to(torch.float32, copy=True)
    low, high = torch.aminmax(x32, dim=-1)
    scales = torch.maximum(low.neg_(), high).clamp_(min=1e-12).div_(127.0)
    quantized = x32.div_(scales[:, None]).round_().to(torch.int8)  # |x| / scale <= 127
    return quantized, scales


def _quantize_weight(weight: torch.Tensor, rows_per_chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_rows over chunks of rows: fp32 temporaries of a whole 350M head would be ~0.8 GB."""
    quantized = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    scales = torch.empty(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, weight.shape[0], rows_per_chunk):
        chunk = slice(start, start + rows_per_chunk)
        quantized[chunk], scales[chunk] = quantize_rows(weight[chunk])
    return quantized, scales


class _Int8Rows(QuantizedLinear):
    """int8 rows times a per-row scale (symmetric), the storage Int8Linear and W8A8Linear share.

    With ``kernels`` the int8 weight is kept only in the native kernels' panel layout (``group``
    k values per panel row), with fp32 scales padded to whole panels; otherwise row-major for
    torch's kernels.
    """

    group = PAIR
    scales: torch.Tensor
    packed_int8: torch.Tensor
    padded_scales: torch.Tensor
    weight_int8: torch.Tensor

    def __init__(self, linear: nn.Linear, kernels: ModuleType | None = None) -> None:
        super().__init__(linear, kernels if native_width(linear.in_features) else None)
        quantized, scales = _quantize_weight(linear.weight.detach())
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        if self.kernels is None:
            self.register_buffer("weight_int8", quantized)
        else:
            self.register_buffer("packed_int8", pack_panels(quantized, self.group, self.kernels.PANEL))
            self.register_buffer("padded_scales", pad_outputs(self.scales.float(), self.kernels.PANEL))


class Int8Linear(_Int8Rows):
    """Weight-only int8: ``x @ dequant(W).T`` with activations kept in the model dtype."""

    native_kind = "int8"

    def native_operands(self) -> list[torch.Tensor]:
        return [self.packed_int8, self.padded_scales]

    def torch_matmul(self, flat: torch.Tensor) -> torch.Tensor:
        if flat.device.type == "cpu" and self.in_features % _INT8PACK_K_MULTIPLE == 0:
            return torch.ops.aten._weight_int8pack_mm(flat.contiguous(), self.weight_int8, self.scales)
        # no fused kernel: dequantize per call (the int8 rows still save memory at rest)
        return F.linear(flat, (self.weight_int8.float() * self.scales[:, None]).to(flat.dtype))


class W8A8Linear(_Int8Rows):
    """int8 weights times per-token int8 activations, accumulated exactly in int32."""

    group = QUAD
    native_kind = "w8a8"
    padded_row_sums: torch.Tensor

    def __init__(self, linear: nn.Linear, kernels: ModuleType | None = None) -> None:
        super().__init__(linear, kernels)
        if self.kernels is not None:  # activations go in as u8 (+128); these sums undo the offset
            sums = self.packed_int8.sum(dim=(1, 3), dtype=torch.int32).flatten()
            self.register_buffer("padded_row_sums", sums)

    def native_operands(self) -> list[torch.Tensor]:
        return [self.packed_int8, self.padded_row_sums, self.padded_scales]

    def torch_matmul(self, flat: torch.Tensor) -> torch.Tensor:
        activations, row_scales = quantize_rows(flat)
        if flat.device.type == "cpu":
            sums = torch._int_mm(activations, self.weight_int8.t())
        else:  # _int_mm elsewhere has shape limits (CUDA: more than 16 rows); fp32 is exact below 2^24
            sums = activations.float() @ self.weight_int8.float().t()
        return (sums * (row_scales[:, None] * self.scales)).to(flat.dtype)
