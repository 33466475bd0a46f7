"""The layers of model/arch/layers.py with their elementwise work in model/native/kernels' fused loops.

Why separate: layers.py stays plain PyTorch that reads like the reference, and these
subclasses override only the steps the kernels replace (a norm, a gate, the short conv, the
attention projection and single-query attention). `use_native_layers` swaps them into a model
(the way `replace_linears` swaps linears) and `use_reference_layers` swaps them back; the loader
does it once, through model/native/accelerate.py. tests/model/test_layer_ops.py checks each against the
PyTorch code it replaces.

``NATIVE_SUBCLASS`` is an explicit table of every (reference, native) pair, another
architecture's too (model/arch/lfm2_moe.py's router): importing a module never changes it, and
model/arch/ never imports this package (tests/test_layers.py).

The swap changes each module's ``__class__`` in place (as torch.nn.utils.parametrize does)
instead of building a new module: the module keeps its parameters, buffers, hooks and caches
(ShortConv's taps), its place in the model and its state_dict: nothing is copied, and the
swap undoes as simply. The subclasses therefore add no state but ``kernels`` and no ``__init__``.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from model.arch.layers import Attention, RMSNorm, Rope, ShortConv, SwiGLU
from model.arch.lfm2_moe import Router, Routing
from model.batch import AttentionGroup, ForwardBatch
from model.native.kernels.layout import PAIR, native_width, pack_panels


class NativeRMSNorm(RMSNorm):
    """The residual add and the norm in one pass."""

    kernels: ModuleType

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        return self.kernels.add_rms_norm(x, residual, self.weight, self.eps)


class NativeSwiGLU(SwiGLU):
    """silu(gate) * up in one pass between the two matmuls."""

    kernels: ModuleType

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.kernels.swiglu(self.w13(x)))


class NativeShortConv(ShortConv):
    """The gates, the causal conv and the conv-state writes in one pass between the projections."""

    kernels: ModuleType

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state: torch.Tensor) -> torch.Tensor:
        gated = self.kernels.short_conv(
            self.in_proj(x),
            state,
            self.taps(),
            self.conv.bias,
            batch.conv_src_rows,
            batch.conv_window,
            batch.conv_write_index,
            batch.conv_write_rows,
        )
        return self.out_proj(gated)


class NativeAttention(Attention):
    """q/k norms, RoPE and the KV write in one pass; single-query rows attend from the pool in place.

    Groups of several queries per sequence (longer prompt chunks) still gather for SDPA.
    """

    kernels: ModuleType

    def forward(
        self,
        x: torch.Tensor,
        batch: ForwardBatch,
        rope: Rope,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        group = batch.single_query_group()
        if group is not None:
            # every token is a single-query row, in packed order: no gather or scatter of q
            q = self._project(x, batch, rope, k_cache, v_cache)
            out = self._attend(q, group, batch, k_cache, v_cache)
            return self.out_proj(out.view(x.shape[0], -1))
        return super().forward(x, batch, rope, k_cache, v_cache)

    def _project(
        self, x: torch.Tensor, batch: ForwardBatch, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        return self.kernels.attention_prep(
            self.qkv_proj(x),
            self.q_layernorm.weight,
            self.k_layernorm.weight,
            self.q_layernorm.eps,
            rope.cos_table,
            rope.sin_table,
            rope.positions,
            k_cache,
            v_cache,
            batch.kv_write_slots,
            self.num_heads,
        )

    def _attend(
        self,
        q: torch.Tensor,
        group: AttentionGroup,
        batch: ForwardBatch,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        """Single-query rows through the paged kernel, each over its own context read in place."""
        if group.context_lens is None:
            return super()._attend(q, group, batch, k_cache, v_cache)
        return self.kernels.decode_attention(
            q,
            k_cache,
            v_cache,
            group.kv_blocks,
            group.context_lens,
            batch.block_size,
            self.head_dim**-0.5,
            group.context_starts,
        )


class NativeRouter(Router):
    """The router's product in model/native/kernels' bf16 linear (fp32 out), its choice, grouping and sum in
    cpu_moe.cpp: a few calls where the PyTorch code makes ~25, bit for bit the same for a row alone
    or in any batch."""

    kernels: ModuleType
    _panels: torch.Tensor | None = None  # the weight in the linear kernel's layout, packed on first use

    def forward(self, x: torch.Tensor, expert_bias: torch.Tensor | None) -> Routing:
        if not native_width(x.shape[1]):  # the linear kernel's K steps (every LFM2 width qualifies)
            return super().forward(x, expert_bias)
        if self._panels is None:
            self._panels = pack_panels(self.weight.detach(), PAIR, self.kernels.PANEL)
        logits = torch.empty(x.shape[0], self.weight.shape[0])
        self.kernels.linear_bf16(x.contiguous(), self._panels, self.weight.shape[0], logits)
        weights, positions, tokens, counts = self.kernels.moe_route(
            logits, expert_bias, self.top_k, self.norm_topk_prob, self.routed_scaling_factor
        )
        return Routing(weights, positions, tokens, counts.tolist())

    def combine(self, outputs: torch.Tensor, routing: Routing) -> torch.Tensor:
        return self.kernels.moe_combine(outputs, routing.positions, routing.weights)


NATIVE_SUBCLASS: dict[type[nn.Module], type[nn.Module]] = {
    RMSNorm: NativeRMSNorm,
    SwiGLU: NativeSwiGLU,
    ShortConv: NativeShortConv,
    Attention: NativeAttention,
    Router: NativeRouter,
}
REFERENCE_CLASS = {native: reference for reference, native in NATIVE_SUBCLASS.items()}


def use_native_layers(model: nn.Module, kernels: ModuleType, attention: bool = True) -> nn.Module:
    """Swap every layer below ``model`` (``model`` included) for its native subclass, in place.

    ``attention`` False leaves attention as it is (its head shape is outside what the paged
    kernel takes). A layer's own sublayers are left alone: Attention's q/k norms run inside
    ``attention_prep``, not as RMSNorm modules.
    """
    for reference, native in NATIVE_SUBCLASS.items():
        if isinstance(model, reference):
            if reference is not Attention or attention:
                model.__class__ = native
                model.kernels = kernels  # type: ignore[assignment]  # a plain attribute, not a submodule
            return model
    for child in model.children():
        use_native_layers(child, kernels, attention)
    return model


def use_reference_layers(model: nn.Module) -> nn.Module:
    """Undo `use_native_layers`: every native layer below ``model`` runs its PyTorch code again."""
    for module in model.modules():
        if type(module) in REFERENCE_CLASS:
            module.__class__ = REFERENCE_CLASS[type(module)]
            del module.kernels
    return model
