"""LFM3 over packed ragged batches: LFM2's hybrid stack with LFM3's differences as small pieces.

Read beside transformers' modular_lfm3.py. What differs from LFM2 (model/arch/lfm2.py, model/arch/layers.py):

* ``GatedAttention``: the dense attention's heads, each scaled by ``sigmoid(g_proj(x))`` before
  the output projection ``o_proj`` (Qwen3 names in the checkpoint: q/k/v/o_proj, q_norm, k_norm; the
  gate is ``gate_proj`` on disk, transformers' ``g_proj`` in memory: model/checkpoint/names.py).
* sliding-window layers: the same attention over the last ``sliding_window`` positions, with
  their KV in a pool of their own (``HybridCache.sliding_k``; ``ForwardBatch.sliding``).
* ``rotary_table``: one RoPE per attention layer type; "proportional" RoPE turns only the first
  pairs of head_dim and leaves the rest with frequency 0 (cos 1, sin 0), so the dense rotary
  code and the native ``attention_prep`` apply it unchanged.
* ``Lfm3DecoderLayer``: LFM2's layer overriding only these: its attention (gated), its mixer
  (a sliding-window layer reads its own pool) and its forward (sandwich norms, an RMSNorm on
  each sublayer's output before the add). The model runs LFM2's loop over them unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from model.arch.cache import HybridCache
from model.arch.layers import Attention, DecoderLayer, RMSNorm, Rope, Ropes, RotaryTable
from model.arch.lfm2 import Lfm2ForCausalLM
from model.arch.lfm2_config import ATTENTION, CONV, SLIDING
from model.arch.lfm3_config import Lfm3Config, RopeParameters
from model.batch import ForwardBatch


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
    the native swap (model/native/layers.py) reaches it as it reaches LFM2's.
    """

    def __init__(self, config: Lfm3Config) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.attention = Attention(config)
        self.attention.out_proj = nn.Identity()  # type: ignore[assignment]  # o_proj projects, after the gate
        self.g_proj = nn.Linear(config.hidden_size, self.num_heads, bias=False)
        self.o_proj = nn.Linear(self.num_heads * config.head_dim, config.hidden_size, bias=False)

    def forward(
        self, x: torch.Tensor, batch: ForwardBatch, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        heads = self.attention(x, batch, rope, k_cache, v_cache).view(x.shape[0], self.num_heads, -1)
        gated = heads * torch.sigmoid(self.g_proj(x)).unsqueeze(-1)
        return self.o_proj(gated.view(x.shape[0], -1))


class Lfm3DecoderLayer(DecoderLayer):
    """operator_norm -> (attention | conv) -> post_operator_norm -> residual
    -> ffn_norm -> SwiGLU -> post_ffn_norm -> residual (post norms: identity without sandwich norms)."""

    def __init__(self, config: Lfm3Config, index: int) -> None:
        super().__init__(config, index)
        if self.is_attention and config.use_attention_gate:
            self.self_attn = GatedAttention(config)  # type: ignore[assignment]  # called as Attention is
        h = config.hidden_size
        sandwich = config.use_sandwich_norm
        self.post_operator_norm = RMSNorm(h, config.norm_eps) if sandwich else nn.Identity()
        self.post_ffn_norm = RMSNorm(h, config.norm_eps) if sandwich else nn.Identity()

    def forward(
        self,
        hidden: torch.Tensor,
        pending: torch.Tensor | None,
        batch: ForwardBatch,
        ropes: Ropes,
        cache: HybridCache,
    ) -> torch.Tensor:
        """LFM2's layer (the same deferred residual adds) with each sublayer's output normed first."""
        mixed = self.post_operator_norm(self.mix(self.operator_norm(hidden, pending), batch, ropes, cache))
        return self.post_ffn_norm(self.feed_forward(self.ffn_norm(hidden, mixed)))

    def mix(self, x: torch.Tensor, batch: ForwardBatch, ropes: Ropes, cache: HybridCache) -> torch.Tensor:
        """LFM2's mixers; a sliding-window layer attends from its own pool, over the step as its
        window sees it (``batch.sliding``)."""
        if self.kind != SLIDING:
            return super().mix(x, batch, ropes, cache)
        i = self.cache_index
        return self.self_attn(x, batch.sliding, ropes[SLIDING], cache.sliding_k[i], cache.sliding_v[i])


class Lfm3ForCausalLM(Lfm2ForCausalLM):
    """LFM3: full and sliding-window gated attention, conv, sandwich norms; a tied or untied head."""

    decoder_layer = Lfm3DecoderLayer
    config: Lfm3Config

    def __init__(self, config: Lfm3Config) -> None:
        super().__init__(config)
        tables = {kind: rotary_table(config.head_dim, rope) for kind, rope in config.rope_parameters.items()}
        full = tables.get(ATTENTION, self.rotary[ATTENTION])
        self.rotary = {ATTENTION: full, SLIDING: tables.get(SLIDING, full)}

    @classmethod
    def fuse_layer(  # type: ignore[override]  # an architecture's classmethods get its own config
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
