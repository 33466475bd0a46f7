"""Opt-in weight-only int8 quantization of the linear layers.

Decode at small batch is bound by how many weight bytes each step reads; int8 halves them
against bf16. Activations stay in the model dtype and the matmul dequantizes on the fly
(``aten._weight_int8pack_mm`` on CPU), so no calibration data is needed. Scales are per
output channel, symmetric.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Int8Linear(nn.Module):
    """A bias-optional linear layer whose weight is stored as int8 rows times a per-row scale."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        quantized = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("weight_int8", quantized.contiguous())
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.device.type == "cpu":
            out = torch.ops.aten._weight_int8pack_mm(flat.contiguous(), self.weight_int8, self.scales)
        else:  # no fused kernel: dequantize, still saving memory at rest
            out = F.linear(flat, self.weight_int8.to(flat.dtype) * self.scales[:, None])
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear in ``model`` (lm_head included) with an Int8Linear, in place."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(model, name, Int8Linear(child))
        else:
            quantize_int8(child)
    return model
