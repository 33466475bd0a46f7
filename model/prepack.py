"""Linear weights pre-packed once into oneDNN's blocked layout, for bf16 inference on CPU.

``F.linear`` on bf16 CPU tensors repacks the weight into oneDNN's blocked layout on every
call. For the one-to-few-row products of decode that repacking is most of the cost: packing
once at load time made a 1024x9216 product 1.6-1.9x faster at 1-8 rows on this project's
build machine, with bit-identical results (same kernel, same accumulation order).
"""

from __future__ import annotations

import torch
from torch import nn


class PackedLinear(nn.Module):
    """A bias-free linear layer whose weight lives in oneDNN's blocked layout."""

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


def can_prepack(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Packing pays for bf16 on a CPU whose torch build has oneDNN."""
    return (
        dtype == torch.bfloat16
        and torch.device(device).type == "cpu"
        and torch.backends.mkldnn.is_available()
    )


def prepack_linears(model: nn.Module, skip: tuple[str, ...] = ()) -> nn.Module:
    """Replace every nn.Linear (except names in ``skip``) with a PackedLinear, in place."""
    for name, child in list(model.named_children()):
        if name in skip:
            continue
        if isinstance(child, nn.Linear):
            setattr(model, name, PackedLinear(child))
        else:
            prepack_linears(child, skip)
    return model
