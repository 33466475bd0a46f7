"""A model's decoder stack as one native call for decode steps (model/kernels' DecodeStack).

Why: in a decode step every layer runs ~8 small Python module calls between its kernels. At one
stream of the 350M model those calls cost ~1.5 ms of a ~9 ms step, because the weights streaming
through the caches leave the interpreter's own code and data cold (docs/ARCHITECTURE.md has the
profile). The native stack calls the same kernels with the same arguments in the same order as
the Python layers, so it changes no bit of any output; it only drops the Python between them.

It covers what LFM2's dense layers are when the kernels run everything: native norms, short
convs, paged attention and SwiGLUs, every linear native and bias-free. Anything else (an MoE
feed-forward, LFM3's layers, a linear left to PyTorch) keeps the Python layers; so does every
step that is not all single-query rows (a prompt chunk longer than the model's row_query_limit
attends through SDPA). Decode steps, and short prompt chunks paced in beside them, take it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from model.batch import ForwardBatch
from model.cache import HybridCache
from model.layers import DecoderLayer, Rope
from model.linears import NativeLinear
from model.native_layers import NativeAttention, NativeRMSNorm, NativeShortConv, NativeSwiGLU
from model.quantized_linear import QuantizedLinear


def build_decode_stack(layers: nn.ModuleList) -> Any | None:
    """``layers`` as a native ``DecodeStack``, or None where any part of them runs in Python."""
    built = [_decode_layer(layer) for layer in layers]
    if not built or any(layer is None for layer in built):
        return None
    return layers[0].operator_norm.kernels.DecodeStack(built)


def single_query_step(batch: ForwardBatch) -> bool:
    """Every token of the step attends as a single-query row, and no layer slides a window."""
    return batch.sliding is None and batch.single_query_group() is not None


def run_decode_stack(
    stack: Any, hidden: torch.Tensor, batch: ForwardBatch, rope: Rope, cache: HybridCache
) -> torch.Tensor:
    """The step through ``stack``: ``hidden`` updated in place; returns the last layer's output."""
    group = batch.single_query_group()
    return stack.run(
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


def _linear(module: nn.Module) -> Any | None:
    """A native, bias-free linear's ``LinearRef``; None for anything PyTorch computes."""
    native = isinstance(module, NativeLinear | QuantizedLinear) and module.kernels is not None
    if not native or module.bias is not None:
        return None
    return module.kernels.LinearRef(module.native_kind, module.out_features, module.native_operands())


def _decode_layer(layer: nn.Module) -> Any | None:
    if type(layer) is not DecoderLayer:
        return None
    norms, ffn = (layer.operator_norm, layer.ffn_norm), layer.feed_forward
    if any(type(norm) is not NativeRMSNorm for norm in norms) or type(ffn) is not NativeSwiGLU:
        return None
    mixer = layer.self_attn if layer.is_attention else layer.conv
    linears = [_linear(mixer.qkv_proj if layer.is_attention else mixer.in_proj), _linear(mixer.out_proj)]
    linears += [_linear(ffn.w13), _linear(ffn.w2)]
    if any(linear is None for linear in linears) or layer.operator_norm.eps != layer.ffn_norm.eps:
        return None
    mix_in, mix_out, w13, w2 = linears
    kernels = layer.operator_norm.kernels
    weights = (layer.operator_norm.weight, layer.ffn_norm.weight, layer.operator_norm.eps)
    if type(mixer) is NativeAttention:
        # one eps for both head norms, as NativeAttention passes it
        qk = (mixer.q_layernorm.weight, mixer.k_layernorm.weight, mixer.q_layernorm.eps)
        qk += (mixer.num_heads, mixer.head_dim**-0.5)
        return kernels.attention_layer(*weights, mix_in, *qk, mix_out, w13, w2)
    if type(mixer) is NativeShortConv:
        return kernels.conv_layer(*weights, mix_in, mixer.taps(), mixer.conv.bias, mix_out, w13, w2)
    return None
