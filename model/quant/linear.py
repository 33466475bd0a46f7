"""What every quantized linear layer shares: shape, bias, the choice of native or torch product.

model/quant/int8.py (int8, w8a8) and model/quant/int4.py (int4) subclass it; each stores its
weight in registered buffers (a packed layout for model/native/kernels where they run, else row-major
for PyTorch) and says how to multiply by it. It is a ``KernelLinear`` (model/native/kernel_linear.py),
as the bf16 ``NativeLinear`` is: the native decode stack takes either alike.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from model.native.kernel_linear import KernelLinear


class QuantizedLinear(KernelLinear):
    """A bias-optional linear layer whose weight a subclass stores quantized.

    ``kernels`` is the native kernels module where they compute this layer, else None (PyTorch).
    """

    def __init__(self, linear: nn.Linear, kernels: ModuleType | None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = self.torch_matmul(flat) if self.kernels is None else self.native_matmul(flat.contiguous())
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def fill_float(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``self(x)`` as float32, written into ``out``; see model/arch/lfm2.py's `logits_into`."""
        if self.kernels is None or self.bias is not None:
            return out.copy_(self(x))
        return self.native_matmul(x.contiguous(), out)

    def native_matmul(self, flat: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``flat @ W.T`` by the native kernels: bf16 [M, N], or float32 written into ``out``."""
        kernel = getattr(self.kernels, f"linear_{self.native_kind}")
        return kernel(flat, *self.native_operands(), self.out_features, out)

    def torch_matmul(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat @ W.T`` by PyTorch, in ``flat``'s dtype."""
        raise NotImplementedError
