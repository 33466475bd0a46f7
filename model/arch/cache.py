"""Cache tensors of the hybrid model: paged KV for attention layers, conv-state rows for conv layers.

Only storage lives here; which block or row belongs to whom is the engine's decision.

    attention layer j:  k[j], v[j]   [num_blocks * block_size, kv_heads, head_dim]
                        slot of (block b, offset o) = b * block_size + o
    conv layer j:       conv[j]      [num_conv_rows, conv_L_cache - 1, hidden]
                        row 0 = zeros (the state before a sequence's first token)
    sliding layer j:    sliding_k[j], sliding_v[j]   [num_sliding_blocks * block_size, kv_heads, head_dim]
                        a pool of its own (LFM3): a sequence holds only its window's blocks
"""

from __future__ import annotations

import mmap

import torch

from model.arch.lfm2_config import ATTENTION, CONV, SLIDING, Lfm2Config


class HybridCache:
    """Preallocated KV block pool and conv-state rows for one model."""

    ZERO_ROW = 0

    def __init__(
        self,
        config: Lfm2Config,
        num_blocks: int,
        block_size: int,
        num_conv_rows: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        num_sliding_blocks: int = 0,
    ) -> None:
        if num_blocks < 1 or block_size < 1 or num_conv_rows < 1:
            raise ValueError("a cache needs at least one block, one slot per block and one conv row")
        sliding_layers = config.layers_of_kind(SLIDING)
        if sliding_layers and num_sliding_blocks < 1:
            raise ValueError("a model with sliding-window layers needs at least one sliding block")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_conv_rows = num_conv_rows
        self.num_sliding_blocks = num_sliding_blocks if sliding_layers else 0
        kv_shape = (num_blocks * block_size, config.num_key_value_heads, config.head_dim)
        self.k = [_zeros(kv_shape, dtype, device) for _ in config.layers_of_kind(ATTENTION)]
        self.v = [_zeros(kv_shape, dtype, device) for _ in config.layers_of_kind(ATTENTION)]
        conv_shape = (num_conv_rows, config.conv_state_len, config.hidden_size)
        self.conv = [_zeros(conv_shape, dtype, device) for _ in config.layers_of_kind(CONV)]
        sliding_shape = (self.num_sliding_blocks * block_size, config.num_key_value_heads, config.head_dim)
        self.sliding_k = [_zeros(sliding_shape, dtype, device) for _ in sliding_layers]
        self.sliding_v = [_zeros(sliding_shape, dtype, device) for _ in sliding_layers]

    def copy_conv_row(self, src: int, dst: int) -> None:
        """Every conv layer's state row ``src`` into row ``dst`` (a few KB a layer)."""
        for state in self.conv:
            state[dst] = state[src]

    def copy_block(self, src: int, dst: int) -> None:
        """Every attention layer's KV of block ``src`` into block ``dst``."""
        _copy_block(self.k + self.v, self.block_size, src, dst)

    def copy_sliding_block(self, src: int, dst: int) -> None:
        """The same for a block of the sliding-window layers' pool."""
        _copy_block(self.sliding_k + self.sliding_v, self.block_size, src, dst)

    @staticmethod
    def bytes_per_block(config: Lfm2Config, block_size: int, dtype: torch.dtype) -> int:
        """KV of one block over all attention layers plus one conv snapshot row over all conv layers."""
        item = torch.empty((), dtype=dtype).element_size()
        kv_layers = len(config.layers_of_kind(ATTENTION))
        kv = 2 * block_size * config.num_key_value_heads * config.head_dim * kv_layers
        conv = config.conv_state_len * config.hidden_size * len(config.layers_of_kind(CONV))
        return (kv + conv) * item

    @staticmethod
    def bytes_per_sliding_block(config: Lfm2Config, block_size: int, dtype: torch.dtype) -> int:
        """KV of one block over all sliding-window layers (0 for a model without them)."""
        item = torch.empty((), dtype=dtype).element_size()
        per_layer = 2 * block_size * config.num_key_value_heads * config.head_dim
        return per_layer * len(config.layers_of_kind(SLIDING)) * item

    @property
    def nbytes(self) -> int:
        tensors = (*self.k, *self.v, *self.conv, *self.sliding_k, *self.sliding_v)
        return sum(t.numel() * t.element_size() for t in tensors)


def _copy_block(tensors: list[torch.Tensor], block_size: int, src: int, dst: int) -> None:
    for kv in tensors:
        kv[dst * block_size : (dst + 1) * block_size] = kv[src * block_size : (src + 1) * block_size]


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Zeros that cost memory only once written, on CPU.

    ``torch.zeros`` touches every page, so a 1 GiB pool would be resident from the start.
    Anonymous mmap pages are zero-filled by the kernel on first touch: the process grows with
    the blocks actually used, and unused slots still read as zeros (never NaN garbage).
    """
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    return torch.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=dtype, count=torch.Size(shape).numel()).view(
        shape
    )
