"""A model's decoder stack as one native call for decode steps (model/native/kernels' DecodeStack).

Why: in a decode step every layer runs ~8 small Python module calls between its kernels. At one
stream of the 350M model those calls cost ~1.5 ms of a ~9 ms step, because the weights streaming
through the caches leave the interpreter's own code and data cold (docs/ARCHITECTURE.md has the
profile). The native stack calls the same kernels with the same arguments in the same order as
the Python layers, so it changes no bit of any output; it only drops the Python between them.

``NativeDecoderStack`` is model/arch/layers.py's ``DecoderStack`` with the same call: the loader swaps
it in place (`use_native_stack`, from model/native/accelerate.py), as model/native/layers.py swaps the
layers, so the model calls its stack the same way whichever runs. It covers what LFM2's dense
layers are when the kernels run everything: native norms, short convs, paged attention and
SwiGLUs, every linear native and bias-free. Anything else (an MoE feed-forward, LFM3's layers, a
linear left to PyTorch) keeps the Python stack; so does every step that is not all single-query
rows (a prompt chunk longer than the model's row_query_limit attends through SDPA), which the
native stack hands to the Python loop it replaces. Decode steps, and short prompt chunks paced in
beside them, take it.
"""

from __future__ import annotations

from typing import Any, TypeGuard, cast

import torch
from torch import nn

from model.arch.cache import HybridCache
from model.arch.layers import Attention, DecoderLayer, DecoderStack, Ropes, ShortConv
from model.arch.lfm2_config import ATTENTION
from model.batch import AttentionGroup, ForwardBatch
from model.native.kernel_linear import KernelLinear
from model.native.layers import NativeAttention, NativeRMSNorm, NativeShortConv, NativeSwiGLU


class NativeDecoderStack(DecoderStack):
    """The layers of a `DecoderStack`, run by the kernels' DecodeStack on single-query steps."""

    native: Any  # the kernels' DecodeStack over these layers (built by use_native_stack)

    def forward(
        self, hidden: torch.Tensor, batch: ForwardBatch, ropes: Ropes, cache: HybridCache
    ) -> torch.Tensor:
        if not single_query_step(batch):
            return super().forward(hidden, batch, ropes, cache)
        group = cast(AttentionGroup, batch.single_query_group())  # single_query_step found it
        rope = ropes[ATTENTION]
        return self.native.run(
            hidden,
            cache.conv,
            cache.k,
            cache.v,
            batch.conv_src_rows,
            batch.conv_window,
            batch.conv_write_index,
            batch.conv_write_rows,
            rope.cos_table,
            rope.sin_table,
            rope.positions,
            batch.kv_write_slots,
            group.kv_blocks,
            group.context_lens,
            group.context_starts,
            batch.block_size,
        )


def use_native_stack(stack: DecoderStack) -> DecoderStack:
    """Swap ``stack`` for a `NativeDecoderStack` in place where the kernels run every part of its
    layers (after model/native/layers.py's swap); else leave it as it is."""
    built = [_decode_layer(layer) for layer in stack]
    if built and all(layer is not None for layer in built):
        native = cast(NativeRMSNorm, stack[0].operator_norm).kernels.DecodeStack(built)
        stack.__class__ = NativeDecoderStack
        stack.native = native
    return stack


def use_python_stack(stack: DecoderStack) -> DecoderStack:
    """Undo `use_native_stack`: every step runs the layers' Python loop again."""
    if isinstance(stack, NativeDecoderStack):
        stack.__class__ = DecoderStack  # type: ignore[assignment]  # back to the base: the point
        del stack.native
    return stack


def single_query_step(batch: ForwardBatch) -> bool:
    """Every token of the step attends as a single-query row, and no layer slides a window."""
    return batch.sliding is None and batch.single_query_group() is not None


def _linear(module: nn.Module) -> Any | None:
    """A native, bias-free linear's ``LinearRef``; None for anything PyTorch computes."""
    return module.linear_ref() if isinstance(module, KernelLinear) else None


def _runs_decoder_layer_steps(layer: nn.Module) -> TypeGuard[DecoderLayer]:
    """The layer computes exactly DecoderLayer's steps: LFM2's, or a subclass that only builds other
    parts (an MoE layer; its sparse feed-forward is refused below), not LFM3's extra norms."""
    if not isinstance(layer, DecoderLayer):
        return False
    return (type(layer).forward, type(layer).mix) == (DecoderLayer.forward, DecoderLayer.mix)


def _decode_layer(layer: nn.Module) -> Any | None:
    if not _runs_decoder_layer_steps(layer):
        return None
    norms, ffn = (layer.operator_norm, layer.ffn_norm), layer.feed_forward
    if any(type(norm) is not NativeRMSNorm for norm in norms) or type(ffn) is not NativeSwiGLU:
        return None
    mixer: Attention | ShortConv = layer.self_attn if layer.is_attention else layer.conv
    mix_in_proj = mixer.qkv_proj if isinstance(mixer, Attention) else mixer.in_proj
    linears = [_linear(mix_in_proj), _linear(mixer.out_proj), _linear(ffn.w13), _linear(ffn.w2)]
    if any(linear is None for linear in linears) or layer.operator_norm.eps != layer.ffn_norm.eps:
        return None
    mix_in, mix_out, w13, w2 = linears
    kernels = cast(NativeRMSNorm, layer.operator_norm).kernels  # its type was checked above
    weights = (layer.operator_norm.weight, layer.ffn_norm.weight, layer.operator_norm.eps)
    if type(mixer) is NativeAttention:
        # one eps for both head norms, as NativeAttention passes it
        head_norms = (mixer.q_layernorm.weight, mixer.k_layernorm.weight, mixer.q_layernorm.eps)
        heads = (mixer.num_heads, mixer.head_dim**-0.5)
        return kernels.attention_layer(*weights, mix_in, *head_norms, *heads, mix_out, w13, w2)
    if type(mixer) is NativeShortConv:
        return kernels.conv_layer(*weights, mix_in, mixer.taps(), mixer.conv.bias, mix_out, w13, w2)
    return None
