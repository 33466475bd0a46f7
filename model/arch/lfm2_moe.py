"""LFM2-MoE over packed ragged batches: LFM2's hybrid stack with sparse mixture-of-experts feed-forwards.

Read beside transformers' modeling_lfm2_moe.py. What differs from LFM2 (model/arch/lfm2.py):

* `Router` (checkpoint name ``feed_forward.gate``): each token's expert scores are the sigmoid of a
  linear over it; the ``num_experts_per_tok`` best by score + ``expert_bias`` are chosen, each
  weighted by its score (normalised to sum to 1 with ``norm_topk_prob``, times
  ``routed_scaling_factor``). It also groups the step's (token, expert) pairs by expert and sums
  each token's expert outputs back, in rank order, in float32.
* `SparseMoe`: one SwiGLU per expert (model/arch/layers.py's, so native, int8, w8a8 and int4 linears
  reach experts as they reach dense ones); each expert that has tokens this step runs once over
  all of them, and the others are not touched: a 1-stream decode step reads 4 of 32 experts.
* `MoeDecoderLayer`: LFM2's layer whose feed-forward, from ``num_dense_layers`` on, is a SparseMoe;
  `Lfm2MoeForCausalLM` is LFM2 over these layers. The router's native form (model/native/layers.py's
  `NativeRouter`) is swapped in underneath by the loader, as the other layers' are.

A token's output never depends on which other tokens share its experts: each linear computes a
row alone (model/native/kernels), and its experts' outputs are summed in its own rank order
(docs/ARCHITECTURE.md, "LFM2-MoE").
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from model.arch.layers import DecoderLayer, SwiGLU
from model.arch.lfm2 import Lfm2ForCausalLM, fuse_swiglu
from model.arch.lfm2_moe_config import Lfm2MoeConfig


class Routing(NamedTuple):
    """One step's routing: each token's choice, and the (token, expert) pairs grouped by expert.

    ``weights`` fp32 [T, k]: token t's weight for its r-th expert (best first). The pairs are
    ordered by expert, and by token within an expert: ``tokens`` [T * k] names the token of each,
    ``positions`` [T, k] where token t's r-th pair sits, ``counts`` how many pairs each expert has.
    """

    weights: torch.Tensor
    positions: torch.Tensor
    tokens: torch.Tensor
    counts: list[int]


class Router(nn.Module):
    """The experts each token goes to, and their outputs summed back per token (transformers'
    Lfm2MoeTopKRouter, plus the grouping and the sum)."""

    def __init__(self, config: Lfm2MoeConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.routed_scaling_factor = config.routed_scaling_factor

    def forward(self, x: torch.Tensor, expert_bias: torch.Tensor | None) -> Routing:
        scores = F.linear(x, self.weight).float().sigmoid()
        ranking = scores if expert_bias is None else scores + expert_bias
        experts = ranking.topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, experts)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-6)
        pairs = experts.flatten()
        order = pairs.argsort(stable=True)
        slots = torch.arange(order.numel(), device=order.device)
        positions = torch.empty_like(order).index_copy_(0, order, slots)
        counts = torch.bincount(pairs, minlength=self.weight.shape[0]).tolist()
        weights = weights * self.routed_scaling_factor
        return Routing(weights, positions.view(experts.shape), order // self.top_k, counts)

    def combine(self, outputs: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Each token's sum of ``weight * output`` over its experts (``outputs`` in grouped order),
        rank by rank in float32, rounded once to the outputs' dtype."""
        picked = outputs[routing.positions]  # [T, k, h]
        weights = routing.weights.unsqueeze(-1)
        total = picked[:, 0].float() * weights[:, 0]
        for rank in range(1, self.top_k):
            total += picked[:, rank].float() * weights[:, rank]
        return total.to(outputs.dtype)


class SparseMoe(nn.Module):
    """Each token through the experts its router chooses, every expert once over all its tokens."""

    def __init__(self, config: Lfm2MoeConfig) -> None:
        super().__init__()
        self.gate = Router(config)
        self.experts = nn.ModuleList(
            SwiGLU(config.hidden_size, config.moe_intermediate_size) for _ in range(config.num_experts)
        )
        # float32 whatever the model's dtype (Lfm2MoeForCausalLM.empty), as transformers keeps it:
        # it decides between expert scores closer together than bf16's step
        bias = torch.zeros(config.num_experts) if config.use_expert_bias else None
        self.register_buffer("expert_bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        routing = self.gate(x, self.expert_bias)
        grouped = x.index_select(0, routing.tokens)
        outputs = torch.empty_like(grouped)
        start = 0
        for expert, count in zip(self.experts, routing.counts, strict=True):
            if count:
                outputs[start : start + count] = expert(grouped[start : start + count])
                start += count
        return self.gate.combine(outputs, routing)


class MoeDecoderLayer(DecoderLayer):
    """LFM2's layer, with a SparseMoe feed-forward from ``num_dense_layers`` on."""

    def __init__(self, config: Lfm2MoeConfig, index: int) -> None:
        super().__init__(config, index)
        if config.is_moe_layer(index):
            self.feed_forward = SparseMoe(config)  # type: ignore[assignment]  # called as SwiGLU is


class Lfm2MoeForCausalLM(Lfm2ForCausalLM):
    """LFM2 with a SparseMoe feed-forward in every layer from ``num_dense_layers`` on."""

    decoder_layer = MoeDecoderLayer
    config: Lfm2MoeConfig

    @classmethod
    def empty(  # type: ignore[override]  # an architecture's classmethods get its own config
        cls, config: Lfm2MoeConfig, dtype: torch.dtype
    ) -> Lfm2MoeForCausalLM:
        """As LFM2's, with the expert biases kept in float32 (SparseMoe)."""
        model = super().empty(config, dtype)
        for module in model.modules():
            if isinstance(module, SparseMoe) and module.expert_bias is not None:
                module.expert_bias = module.expert_bias.float()
        return model  # type: ignore[return-value]  # built by cls: this class

    @classmethod
    def fuse_feed_forward(  # type: ignore[override]  # an architecture's classmethods get its own config
        cls, tensors: dict[str, torch.Tensor], config: Lfm2MoeConfig, layer: int, prefix: str
    ) -> None:
        """A dense layer's SwiGLU as LFM2's; in an MoE layer, each expert's w1 and w3 into its w13."""
        if not config.is_moe_layer(layer):
            super().fuse_feed_forward(tensors, config, layer, prefix)
            return
        for e in range(config.num_experts):
            fuse_swiglu(tensors, f"{prefix}experts.{e}.")
