"""What a linear layer model/native/kernels can multiply by offers the native decode stack.

Two families compute linears in the kernels: model/native/linears.py's ``NativeLinear`` (bf16) and
model/quant/linear.py's ``QuantizedLinear`` (int8, w8a8, int4). Both are a ``KernelLinear``,
so model/native/stack.py asks one question of any linear (`linear_ref`) instead of naming them.
Kept in a module of its own: the quantized cache's key digests the sources of a quantized
layer's base classes (model/checkpoint/quantized_cache.py), and this one changes rarely.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
from torch import nn


class KernelLinear(nn.Module):
    """A linear layer whose product model/native/kernels' ``linear_<native_kind>`` computes, where they run.

    ``kernels`` is None where PyTorch computes it (a quantized layer on a CPU without the kernels).
    """

    in_features: int
    out_features: int
    bias: torch.Tensor | None
    kernels: ModuleType | None
    native_kind: str  # which kernel multiplies by the native operands: linear_<kind>

    def native_operands(self) -> list[torch.Tensor]:
        """The packed buffers the native kernel reads, in its argument order."""
        raise NotImplementedError

    def linear_ref(self) -> Any | None:
        """The kernels' ``LinearRef`` to this layer (what the native decode stack multiplies by), or
        None where the stack cannot run it: PyTorch computes it, or it adds a bias."""
        if self.kernels is None or self.bias is not None:
            return None
        return self.kernels.LinearRef(self.native_kind, self.out_features, self.native_operands())
