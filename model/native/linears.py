"""The CPU forms of a bf16 or float32 linear layer, and the walk that swaps them into a model.

- ``NativeLinear``: the weight packed in model/native/kernels' panel layout and multiplied by its
  loop (AVX-512 or AVX2), at every batch size: it streams weights at memory speed at one row and
  outpaces oneDNN at prefill sizes too (docs/ARCHITECTURE.md), and a row's result never
  depends on the other rows of the batch. A ``KernelLinear`` (model/native/kernel_linear.py), as the
  quantized layers are, so the native decode stack takes either alike.
- ``NativeFloatLinear``: a float32 model's linear in the kernels' fp32 loop. A bf16 checkpoint
  loaded as float32 (every LFM2 release) widened its weights exactly, so they are kept as bf16:
  half the bytes per step for the same fp32 products and sums. A weight with any value bf16 cannot
  hold stays fp32.
- ``PackedLinear``: the fallback where the native kernels cannot be built. bf16, where oneDNN does
  bf16 (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): oneDNN repacks a bf16 weight into its blocked layout
  on every ``F.linear`` call; packing once at load is bit-identical to ``F.linear`` and faster at
  decode sizes. float32, wherever PyTorch has oneDNN: ``F.linear`` goes to the BLAS (MKL), whose
  small-row products stream a fraction of the memory bandwidth on some CPUs (AMD's, MKL's
  generic path), while oneDNN's packed product JITs for the CPU it finds; the sums come in another
  order, as any BLAS's may (docs/PERFORMANCE.md has the figures). Elsewhere layers stay plain
  ``nn.Linear``.

Both keep their own copy of the weight in a layout that cannot serve embedding lookups.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from types import ModuleType

import torch
from torch import nn

from model.native.kernel_linear import KernelLinear
from model.native.kernels.layout import PAIR, native_width, pack_panels


class NativeLinear(KernelLinear):
    """A bf16 linear layer computed by model/native/kernels' ``linear_bf16``."""

    kernels: ModuleType
    packed_weight: torch.Tensor

    def __init__(self, linear: nn.Linear, kernels: ModuleType) -> None:
        super().__init__()
        if not native_width(linear.in_features):
            raise ValueError(f"the native kernels need in_features divisible by 4, not {linear.in_features}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed_weight", pack_panels(linear.weight.detach(), PAIR, kernels.PANEL))
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.kernels = kernels

    native_kind = "bf16"

    def native_operands(self) -> list[torch.Tensor]:
        """The packed weight ``linear_bf16`` reads."""
        return [self.packed_weight]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).contiguous()
        out = self._multiply(flat, self.packed_weight, self.out_features)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def fill_float(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``self(x)`` as float32, written into ``out`` [rows, out_features]; see model/arch/lfm2.py's
        `logits_into`."""
        if self.bias is not None:
            return out.copy_(self(x))
        return self._multiply(x.contiguous(), self.packed_weight, self.out_features, out)

    def _multiply(self, *args: torch.Tensor | int) -> torch.Tensor:
        """The kernel named by ``native_kind``: ``linear_bf16`` here."""
        return self.kernels.linear_bf16(*args)


class NativeFloatLinear(NativeLinear):
    """A float32 linear layer computed by model/native/kernels' ``linear_f32``; its weight bf16 if exact."""

    def __init__(self, linear: nn.Linear, kernels: ModuleType) -> None:
        KernelLinear.__init__(self)
        if not native_width(linear.in_features):
            raise ValueError(f"the native kernels need in_features divisible by 4, not {linear.in_features}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer(
            "packed_weight", pack_panels(exact_narrowing(linear.weight.detach()), 1, kernels.PANEL)
        )
        self.bias = None if linear.bias is None else linear.bias.detach()
        self.kernels = kernels

    native_kind = "f32"

    def _multiply(self, *args: torch.Tensor | int) -> torch.Tensor:
        return self.kernels.linear_f32(*args)


def exact_narrowing(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` as bf16 where that loses nothing (it was bf16 before it was widened), else as it is."""
    narrow = weight.to(torch.bfloat16)
    return narrow if torch.equal(narrow.to(weight.dtype), weight) else weight


class PackedLinear(nn.Module):
    """A linear layer (bf16 or float32) whose weight lives in oneDNN's blocked layout."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(weight, 1))
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed_weight, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def cpu_linear(kernels: ModuleType | None, dtype: torch.dtype) -> Callable[[nn.Linear], nn.Module] | None:
    """How to build each CPU linear of a ``dtype`` model, or None (keep ``nn.Linear``)."""
    if dtype != torch.float32:
        return bf16_cpu_linear(kernels)
    if kernels is None:
        return PackedLinear if onednn_float32_preferred() else None
    return lambda linear: NativeFloatLinear(linear, kernels) if native_width(linear.in_features) else linear


def bf16_cpu_linear(kernels: ModuleType | None) -> Callable[[nn.Linear], nn.Module] | None:
    """How to build each bf16 CPU linear: native where the kernels run, else oneDNN-packed where
    oneDNN does bf16 on this CPU, else None (keep ``nn.Linear``)."""
    if kernels is None:
        return torch_bf16_linear if onednn_bf16_supported() else None
    return lambda linear: (
        NativeLinear(linear, kernels) if native_width(linear.in_features) else torch_bf16_linear(linear)
    )


def torch_bf16_linear(linear: nn.Linear) -> nn.Module:
    """PyTorch's fastest form of a bf16 CPU linear here: oneDNN-packed where oneDNN does bf16, else as is."""
    return PackedLinear(linear) if onednn_bf16_supported() else linear


def onednn_bf16_supported() -> bool:
    """oneDNN's bf16 prepack raises on CPUs without AVX-512 BW/VL/DQ or AVX-NE-CONVERT (most AVX2 ones)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def onednn_float32_preferred() -> bool:
    """oneDNN's packed float32 product beats the BLAS's on x86 (measured); elsewhere, as on ARM, where
    PyTorch's oneDNN may defer to another library, ``F.linear`` stays."""
    return torch.backends.mkldnn.is_available() and platform.machine().lower() in ("x86_64", "amd64")


def replace_linears(
    model: nn.Module, make: Callable[[nn.Linear], nn.Module], skip: tuple[str, ...] = ()
) -> nn.Module:
    """Replace every nn.Linear below ``model`` (except children named in ``skip``) with ``make(it)``."""
    for name, child in list(model.named_children()):
        if name in skip:
            continue
        if isinstance(child, nn.Linear):
            setattr(model, name, make(child))
        else:
            replace_linears(child, make, skip)
    return model
