"""LFM2 building blocks, operating on packed tokens ``[T, hidden]``.

Parameter names match the Hugging Face checkpoint, so weights load without renaming.
Only attention and the short conv look at sequence boundaries, through ``ForwardBatch``.

Pure PyTorch, to read beside transformers' modular_lfm2: this is the reference and the
fallback. Each ``DecoderLayer`` owns its forward, and ``DecoderStack`` runs the layers in
order; another architecture's layer (model/arch/lfm3.py, model/arch/lfm2_moe.py) overrides only what differs.
Nothing here knows the native kernels: the loader swaps implementations in underneath
(model/native/accelerate.py): the linears, model/native/layers.py's subclasses that run these steps
in model/native/kernels' fused loops (bf16 on CPU), and model/native/stack.py's stack for decode steps.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from model.arch.cache import HybridCache
from model.arch.lfm2_config import CONV, Lfm2Config
from model.batch import AttentionGroup, ForwardBatch


class RMSNorm(nn.Module):
    """RMSNorm with fp32 statistics; the weight is applied in the input dtype, as the reference does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """Normalize ``x``; with ``residual``, first add it into ``x`` in place (the skip connection)."""
        if residual is not None:
            x.add_(residual)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class SwiGLU(nn.Module):
    """LFM2's feed-forward w2(silu(w1 x) * w3 x), with w1 and w3 fused into one matmul (``w13``)."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.w13 = nn.Linear(hidden, 2 * ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class RotaryTable:
    """cos/sin for every position, in fp32, grown on demand (no per-step trig)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim
        self.inv_freq = 1.0 / (theta**exponents)
        self.cos = torch.empty(0, device="cpu")
        self.sin = torch.empty(0, device="cpu")

    def at(self, positions: torch.Tensor) -> Rope:
        """The tables, grown to cover ``positions``, for one step at those positions."""
        needed = int(positions.max()) + 1
        if self.cos.shape[0] < needed or self.cos.device != positions.device:
            size = max(needed, 2 * self.cos.shape[0], 4096)
            freqs = torch.outer(torch.arange(size, dtype=torch.float32, device="cpu"), self.inv_freq)
            self.cos, self.sin = freqs.cos().to(positions.device), freqs.sin().to(positions.device)
        return Rope(self.cos, self.sin, positions)


class Rope:
    """One step's RoPE: whole tables (for the fused kernel) and, gathered on first use, its rows."""

    def __init__(self, cos_table: torch.Tensor, sin_table: torch.Tensor, positions: torch.Tensor) -> None:
        self.cos_table, self.sin_table, self.positions = cos_table, sin_table, positions
        self._rows: tuple[torch.Tensor, torch.Tensor] | None = None

    def rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, head_dim // 2] at the step's positions (gathered once, shared by all layers)."""
        if self._rows is None:
            self._rows = self.cos_table[self.positions], self.sin_table[self.positions]
        return self._rows


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on [T, heads, head_dim], computed in fp32."""
    x32 = x.float()
    half = x.shape[-1] // 2
    x1, x2 = x32[..., :half], x32[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Attention(nn.Module):
    """GQA attention with per-head q/k RMSNorm, reading and writing the paged KV pool.

    q, k and v come from one fused matmul (``qkv_proj``): one weight read instead of three.
    Each attention group (model/batch.py) gathers its context's blocks for SDPA.
    """

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(h, self.q_size + 2 * self.kv_size, bias=False)
        self.out_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)
        self.q_layernorm = RMSNorm(self.head_dim, config.norm_eps)
        self.k_layernorm = RMSNorm(self.head_dim, config.norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        batch: ForwardBatch,
        rope: Rope,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        q = self._project(x, batch, rope, k_cache, v_cache)
        out = torch.empty_like(q)
        for group in batch.attention_groups:
            rows = group.query_index.flatten()
            out.index_copy_(0, rows, self._attend(q.index_select(0, rows), group, batch, k_cache, v_cache))
        return self.out_proj(out.view(x.shape[0], -1))

    def _project(
        self, x: torch.Tensor, batch: ForwardBatch, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        """q [T, heads, head_dim], normed and rotated; k and v written to their cache slots."""
        qkv = self.qkv_proj(x)
        t = x.shape[0]
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = self.q_layernorm(q.reshape(t, self.num_heads, self.head_dim))
        k = self.k_layernorm(k.reshape(t, self.num_kv_heads, self.head_dim))
        v = v.reshape(t, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, *rope.rows()), apply_rotary(k, *rope.rows())
        # index_copy_ over flat indices: several times faster than advanced indexing
        k_cache.index_copy_(0, batch.kv_write_slots, k)
        v_cache.index_copy_(0, batch.kv_write_slots, v)
        return q

    def _attend(
        self,
        q: torch.Tensor,
        group: AttentionGroup,
        batch: ForwardBatch,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        """One group's queries ``[g * n_q, heads, head_dim]`` over their gathered context, by SDPA."""
        g, n_q = group.query_index.shape
        q_g = q.view(g, n_q, self.num_heads, self.head_dim).transpose(1, 2)
        num_blocks = k_cache.shape[0] // batch.block_size
        blocks = group.kv_blocks.flatten()
        context = (g, -1, self.num_kv_heads, self.head_dim)
        k_rows, v_rows = k_cache.view(num_blocks, -1), v_cache.view(num_blocks, -1)
        k_g, v_g = group.gather_targets(k_rows)
        k_g = torch.index_select(k_rows, 0, blocks, out=k_g).view(context).transpose(1, 2)
        v_g = torch.index_select(v_rows, 0, blocks, out=v_g).view(context).transpose(1, 2)
        mask = group.sdpa_mask(batch.block_size)
        o = F.scaled_dot_product_attention(q_g, k_g, v_g, attn_mask=mask, enable_gqa=True)
        return o.transpose(1, 2).reshape(g * n_q, self.num_heads, self.head_dim)


class ShortConv(nn.Module):
    """LFM2's double-gated short convolution: out_proj(C * causal_depthwise_conv(B * x)).

    The conv state between steps is the last ``L-1`` values of ``B * x``; see model/batch.py
    for how windows reach back into it.
    """

    def __init__(self, config: Lfm2Config) -> None:
        super().__init__()
        h, kernel = config.hidden_size, config.conv_L_cache
        self.conv = nn.Conv1d(h, h, kernel_size=kernel, groups=h, bias=config.conv_bias, padding=kernel - 1)
        self.in_proj = nn.Linear(h, 3 * h, bias=config.conv_bias)
        self.out_proj = nn.Linear(h, h, bias=config.conv_bias)
        self._taps: torch.Tensor | None = None

    def taps(self) -> torch.Tensor:
        """Conv weights as fp32 [L, hidden], oldest tap first; cached because weights never change."""
        if self._taps is None or self._taps.device != self.conv.weight.device:
            self._taps = self.conv.weight[:, 0, :].t().float().contiguous()
        return self._taps

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: torch.Tensor) -> torch.Tensor:
        b_gate, c_gate, xv = self.in_proj(x).chunk(3, dim=-1)
        bx = b_gate * xv
        ext = torch.cat((state[batch.conv_src_rows].flatten(0, 1), bx))
        conv = (ext[batch.conv_window].float() * self.taps()).sum(1)
        if self.conv.bias is not None:
            conv = conv + self.conv.bias.float()
        state[batch.conv_write_rows] = ext[batch.conv_write_index]
        return self.out_proj(c_gate * conv.to(x.dtype))


Ropes = dict[str, Rope]  # one step's RoPE for each attention kind (layer_types' names)


class DecoderLayer(nn.Module):
    """operator_norm -> (attention | conv) -> residual -> ffn_norm -> SwiGLU -> residual.

    ``index``: the layer's place in the stack, which fixes its kind (``config.layer_types``) and
    its slot among the cache's layers of that kind (k/v for attention, conv rows for conv).
    """

    def __init__(self, config: Lfm2Config, index: int) -> None:
        super().__init__()
        self.kind = config.layer_types[index]
        self.cache_index = config.layers_of_kind(self.kind).index(index)
        self.is_attention = self.kind != CONV
        if self.is_attention:
            self.self_attn = Attention(config)
        else:
            self.conv = ShortConv(config)
        self.feed_forward = SwiGLU(config.hidden_size, config.ffn_dim)
        self.operator_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.ffn_norm = RMSNorm(config.hidden_size, config.norm_eps)

    def forward(
        self,
        hidden: torch.Tensor,
        pending: torch.Tensor | None,
        batch: ForwardBatch,
        ropes: Ropes,
        cache: HybridCache,
    ) -> torch.Tensor:
        """The layer over ``hidden``, which it updates in place; returns its feed-forward's output.

        The residual adds are deferred: ``pending`` (the previous layer's output, None for the
        first) is added into ``hidden`` by this layer's first norm, and the output returned is
        added by the next layer's (or the final norm): an add and a norm in one pass.
        """
        mixed = self.mix(self.operator_norm(hidden, pending), batch, ropes, cache)
        return self.feed_forward(self.ffn_norm(hidden, mixed))

    def mix(self, x: torch.Tensor, batch: ForwardBatch, ropes: Ropes, cache: HybridCache) -> torch.Tensor:
        """The token mixer: attention over this layer's KV pool, or the short conv over its state."""
        i = self.cache_index
        if self.is_attention:
            return self.self_attn(x, batch, ropes[self.kind], cache.k[i], cache.v[i])
        return self.conv(x, batch, cache.conv[i])


class DecoderStack(nn.ModuleList):
    """The decoder layers in order (checkpoint names ``model.layers.<i>``), run over one step.

    A module of its own so the whole loop can be replaced in place: model/native/stack.py's
    NativeDecoderStack takes the same call and runs decode steps as one native call.
    """

    def forward(
        self, hidden: torch.Tensor, batch: ForwardBatch, ropes: Ropes, cache: HybridCache
    ) -> torch.Tensor:
        """Every layer over ``hidden`` (updated in place); returns the last layer's output, which
        the caller adds into ``hidden`` (the final norm does it in one pass)."""
        pending = None
        for layer in self:
            pending = layer(hidden, pending, batch, ropes, cache)
        return cast(torch.Tensor, pending)  # a model has at least one layer
