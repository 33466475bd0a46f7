"""LFM3 over packed ragged batches: LFM2's hybrid stack with LFM3's differences as small pieces.

Read beside transformers' modular_lfm3.py. What differs from LFM2 (model/lfm2.py, model/layers.py):

* ``GatedAttention``: the dense attention's heads, each scaled by ``sigmoid(g_proj(x))`` before
  the output projection ``o_proj`` (Qwen3 names in the checkpoint: q/k/v/o_proj, q_norm, k_norm; the
  gate is ``gate_proj`` on disk, transformers' ``g_proj`` in memory: model/checkpoint_names.py).
* sliding-window layers: the same attention over the last ``sliding_window`` positions, with
  their KV in a pool of their own (``HybridCache.sliding_k``; ``ForwardBatch.sliding``).
* ``rotary_table``: one RoPE per attention layer type; "proportional" RoPE turns only the first
  pairs of head_dim and leaves the rest with frequency 0 (cos 1, sin 0), so the dense rotary
  code and the native ``attention_prep`` apply it unchanged.
* ``Lfm3DecoderLayer``: sandwich norms, an RMSNorm on each sublayer's output before the add.
"""

from __future__ import annotations

import torch
from torch import nn

from model.batch import ForwardBatch
from model.cache import HybridCache
from model.config import ATTENTION, CONV, SLIDING
from model.layers import Attention, RMSNorm, Rope, RotaryTable, ShortConv, SwiGLU
from model.lfm2 import Lfm2ForCausalLM
from model.lfm3_config import Lfm3Config, RopeParameters


def rotary_table(head_dim: int, rope: RopeParameters) -> RotaryTable:
    """The cos/sin table of one layer type, with transformers' frequencies for its RoPE type."""
    table = RotaryTable(head_dim, rope.rope_theta)
    table.inv_freq[rope.rotated_pairs(head_dim) :] = 0.0  # these pairs keep cos 1, sin 0
    if rope.rope_type == "proportional":
        table.inv_freq /= rope.factor
    return table


class GatedAttention(nn.Module):
    """Attention whose heads are each scaled by a sigmoid gate from the layer input, then projected.

    The dense `Attention` computes the heads with its output projection set to the identity, so
    the native swap (model/native_layers.py) reaches it as it reaches LFM2's.
    """

    def __init__(self, config: Lfm3Config) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.attention = Attention(config)
        self.attention.out_proj = nn.Identity()
        self.g_proj = nn.Linear(config.hidden_size, self.num_heads, bias=False)
        self.o_proj = nn.Linear(self.num_heads * config.head_dim, config.hidden_size, bias=False)

    def forward(
        self, x: torch.Tensor, batch: ForwardBatch, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        heads = self.attention(x, batch, rope, k_cache, v_cache).view(x.shape[0], self.num_heads, -1)
        gated = heads * torch.sigmoid(self.g_proj(x)).unsqueeze(-1)
        return self.o_proj(gated.view(x.shape[0], -1))


class Lfm3DecoderLayer(nn.Module):
    """operator_norm -> (attention | conv) -> post_operator_norm -> residual
    -> ffn_norm -> SwiGLU -> post_ffn_norm -> residual (post norms: identity without sandwich norms)."""

    def __init__(self, config: Lfm3Config, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.is_attention = kind != CONV
        if self.is_attention:
            self.self_attn = GatedAttention(config) if config.use_attention_gate else Attention(config)
        else:
            self.conv = ShortConv(config)
        h = config.hidden_size
        self.feed_forward = SwiGLU(h, config.ffn_dim)
        self.operator_norm = RMSNorm(h, config.norm_eps)
        self.ffn_norm = RMSNorm(h, config.norm_eps)
        sandwich = config.use_sandwich_norm
        self.post_operator_norm = RMSNorm(h, config.norm_eps) if sandwich else nn.Identity()
        self.post_ffn_norm = RMSNorm(h, config.norm_eps) if sandwich else nn.Identity()


class Lfm3ForCausalLM(Lfm2ForCausalLM):
    """LFM3: full and sliding-window gated attention, conv, sandwich norms; a tied or untied head."""

    decoder_layer = Lfm3DecoderLayer
    config: Lfm3Config

    def __init__(self, config: Lfm3Config) -> None:
        super().__init__(config)
        tables = {kind: rotary_table(config.head_dim, rope) for kind, rope in config.rope_parameters.items()}
        self.rotary = tables.get(ATTENTION, self.rotary)  # full-attention layers'
        self.sliding_rotary = tables.get(SLIDING, self.rotary)

    @classmethod
    def fuse_layer(
        cls, tensors: dict[str, torch.Tensor], config: Lfm3Config, layer: int
    ) -> dict[str, torch.Tensor]:
        """One layer's checkpoint tensors -> module layout: w1/w3 and q/k/v concatenated (one matmul
        each), the Qwen3 names of the dense attention's parts and the gate's on-disk name renamed to ours."""
        p = f"model.layers.{layer}."
        cls.fuse_feed_forward(tensors, config, layer, p + "feed_forward.")
        if config.layer_types[layer] == CONV:
            return tensors
        attn = p + "self_attn."
        dense = attn + "attention." if config.use_attention_gate else attn
        q, k, v = (tensors.pop(f"{attn}{n}_proj.weight") for n in "qkv")
        tensors[dense + "qkv_proj.weight"] = torch.cat((q, k, v))
        tensors[dense + "q_layernorm.weight"] = tensors.pop(attn + "q_norm.weight")
        tensors[dense + "k_layernorm.weight"] = tensors.pop(attn + "k_norm.weight")
        if config.use_attention_gate:
            tensors[attn + "g_proj.weight"] = tensors.pop(attn + "gate_proj.weight")
        else:
            tensors[attn + "out_proj.weight"] = tensors.pop(attn + "o_proj.weight")
        return tensors

    def decode_layers(self, hidden: torch.Tensor, batch: ForwardBatch, cache: HybridCache) -> torch.Tensor:
        """LFM2's loop with sliding-window layers reading their own pool, and the sandwich norms."""
        rope = self.rotary.at(batch.positions)
        sliding_rope = self.sliding_rotary.at(batch.positions)
        pending = None
        for layer, index in zip(self.model.layers, self._cache_index, strict=True):
            normed = layer.operator_norm(hidden, pending)
            if layer.kind == CONV:
                mixed = layer.conv(normed, batch, cache.conv[index])
            elif layer.kind == SLIDING:
                k, v = cache.sliding_k[index], cache.sliding_v[index]
                mixed = layer.self_attn(normed, batch.sliding, sliding_rope, k, v)
            else:
                mixed = layer.self_attn(normed, batch, rope, cache.k[index], cache.v[index])
            ffn_in = layer.ffn_norm(hidden, layer.post_operator_norm(mixed))
            pending = layer.post_ffn_norm(layer.feed_forward(ffn_in))
        return pending
