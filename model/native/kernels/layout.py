"""How weights are laid out for model/native/kernels' linears, and which shapes the kernels take.

Kept apart from the build (model/native/kernels/__init__.py): packing is plain tensor reshaping that
needs no compiler, and the panel width comes from the loaded kernels (``kernels.PANEL``: 4
vectors of the instruction set's lanes, 64 outputs on AVX-512 and 32 on AVX2).
"""

from __future__ import annotations

import torch

PAIR, QUAD = 2, 4  # k values per group: bf16/int8 panels hold pairs, w8a8 ones quads (int8 dot products)


def native_width(in_features: int) -> bool:
    """The kernels walk K in groups of 4 (w8a8's quads); every LFM2 width qualifies."""
    return in_features % QUAD == 0


def native_attention(head_dim: int, heads: int, kv_heads: int) -> bool:
    """What cpu_attention.cpp's decode_attention takes: head_dim <= 256, <= 16 queries per kv head."""
    return head_dim <= 256 and heads % kv_heads == 0 and heads // kv_heads <= 16


def pack_panels(weight: torch.Tensor, group: int, panel: int) -> torch.Tensor:
    """[N, K] -> [ceil(N / panel), K / group, panel, group]: the layout cpu_linear.cpp streams.

    Rows past N are zero padding (their outputs are never stored). K must divide by 4.
    """
    n, k = weight.shape
    padded = -(-n // panel) * panel
    if padded != n:
        weight = torch.cat((weight, weight.new_zeros(padded - n, k)))
    return weight.view(padded // panel, panel, k // group, group).transpose(1, 2).contiguous()


def pad_outputs(values: torch.Tensor, panel: int) -> torch.Tensor:
    """A per-output vector [N] padded with zeros to whole panels, as the kernels read it."""
    padded = -(-values.shape[0] // panel) * panel
    return torch.cat((values, values.new_zeros(padded - values.shape[0])))


def pack_int4_panels(q: torch.Tensor, panel: int) -> torch.Tensor:
    """int4 codes [N, Kp] (uint8 0-15, Kp a multiple of 32) -> bytes [ceil(N / panel), Kp / 32, panel * 16].

    The layout cpu_linear_int4.cpp streams: per panel and group of 32 k, 4 vectors of panel / 4
    outputs, each in 4 loads whose lanes hold 4 bytes of one output: k = 4t..4t+3 in the low
    nibbles of load t, k = 16+4t..16+4t+3 in the high ones.
    """
    n, kp = q.shape
    padded = -(-n // panel) * panel
    if padded != n:
        q = torch.cat((q, q.new_zeros(padded - n, kp)))
    # [panels, vector j, lane, group, half (k < 16 or not), load t, byte]
    split = q.view(padded // panel, 4, panel // 4, kp // 32, 2, 4, 4)
    packed = split[:, :, :, :, 0] | (split[:, :, :, :, 1] << 4)
    return packed.permute(0, 3, 1, 4, 2, 5).reshape(padded // panel, kp // 32, panel * 16)


def panel_vectors(values: torch.Tensor, panel: int) -> torch.Tensor:
    """Per-output values [N, ...] -> [ceil(N / panel), ..., panel], zero-padded: the kernels' order."""
    padded = -(-values.shape[0] // panel) * panel
    values = torch.cat((values, values.new_zeros(padded - values.shape[0], *values.shape[1:])))
    split = values.view(padded // panel, panel, *values.shape[1:])
    return split.movedim(1, -1).contiguous()
