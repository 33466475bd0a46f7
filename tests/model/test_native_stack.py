"""The native decode stack (model/native/stack.py): the same bits as the Python layers it replaces."""

from __future__ import annotations

import pytest
import torch

from model.arch.cache import HybridCache
from model.batch import SequenceChunk, build_forward_batch
from model.checkpoint.loader import load_model
from model.native.accelerate import undo_native_kernels
from model.native.stack import NativeDecoderStack, single_query_step, use_python_stack

BLOCK = 4
# the third is longer than ROW_QUERY_LIMIT, so the first step attends through SDPA, not the stack
PROMPTS = ([5, 9, 14, 3, 22, 8, 31], [40, 2, 17], list(range(11, 31)))


def _decode(model, steps: int) -> tuple[list[torch.Tensor], HybridCache, list[bool]]:
    """Prefill three prompts of different lengths, then ``steps`` greedy decode steps of all three
    together; every step's logits, the caches after, and whether each step was all single-query rows."""
    cache = HybridCache(model.config, num_blocks=32, block_size=BLOCK, num_conv_rows=4, dtype=model.dtype)
    tables = [list(range(1 + 10 * i, 11 + 10 * i)) for i in range(len(PROMPTS))]
    sequences = [list(prompt) for prompt in PROMPTS]
    rows = list(enumerate(zip(sequences, tables, strict=True)))
    chunks = [SequenceChunk(list(ids), 0, table, i, i) for i, (ids, table) in rows]
    conv = model.config.conv_L_cache
    all_logits, single = [], []
    for _ in range(steps + 1):
        batch = build_forward_batch(chunks, BLOCK, conv, row_query_limit=model.row_query_limit)
        single.append(single_query_step(batch))
        logits = model(batch, cache)
        all_logits.append(logits)
        for i, token in enumerate(logits.argmax(-1).tolist()):
            sequences[i].append(token)
        chunks = [SequenceChunk([ids[-1]], len(ids) - 1, table, i, i) for i, (ids, table) in rows]
    return all_logits, cache, single


@pytest.mark.parametrize("quantize", ["none", "int8", "w8a8", "int4"])
def test_decode_steps_through_the_stack_are_the_python_layers_bit_for_bit(
    native_models, tiny_ckpt_factory, quantize
):
    """Logits of every step and every cache written, equal to the last bit, on every ISA the CPU runs."""
    path = tiny_ckpt_factory("default", dtype=torch.bfloat16)
    stacked = load_model(path, dtype="bfloat16", quantize=quantize)
    python = load_model(path, dtype="bfloat16", quantize=quantize)
    assert isinstance(stacked.model.layers, NativeDecoderStack)
    use_python_stack(python.model.layers)
    ours, ours_cache, single = _decode(stacked, steps=6)
    theirs, their_cache, _ = _decode(python, steps=6)
    assert single == [False] + [True] * 6  # the prompts went through Python, every decode step the stack
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.equal(a, b), f"step {step}"
    for kind in ("k", "v", "conv"):
        for a, b in zip(getattr(ours_cache, kind), getattr(their_cache, kind), strict=True):
            assert torch.equal(a, b), kind


def test_models_the_stack_cannot_run_keep_their_python_layers(native_models, tiny_ckpt_factory):
    """An MoE feed-forward or LFM3's layers leave no stack; swapping the layers back drops one."""
    for preset in ("moe", "lfm3"):
        model = load_model(tiny_ckpt_factory(preset, dtype=torch.bfloat16), dtype="bfloat16")
        assert not isinstance(model.model.layers, NativeDecoderStack), preset
    model = load_model(tiny_ckpt_factory("default", dtype=torch.bfloat16), dtype="bfloat16")
    assert isinstance(model.model.layers, NativeDecoderStack)
    undo_native_kernels(model)
    assert not isinstance(model.model.layers, NativeDecoderStack)


def test_the_stack_refuses_caches_that_do_not_match_its_layers(native_models, tiny_ckpt_factory):
    model = load_model(tiny_ckpt_factory("default", dtype=torch.bfloat16), dtype="bfloat16")
    cache = HybridCache(model.config, num_blocks=8, block_size=BLOCK, num_conv_rows=2, dtype=model.dtype)
    batch = build_forward_batch([SequenceChunk([3], 2, [1], 0, 0)], BLOCK, model.config.conv_L_cache)
    assert single_query_step(batch)
    cache.conv = cache.conv[:-1]
    with pytest.raises(RuntimeError, match="conv caches"):
        model(batch, cache)


def test_a_linear_of_an_unknown_kind_is_refused(native):
    with pytest.raises(RuntimeError, match="unknown linear kind int3"):
        native.LinearRef("int3", 8, [torch.zeros(1)])
    with pytest.raises(RuntimeError, match="int4 linear takes 3 operands, not 1"):
        native.LinearRef("int4", 8, [torch.zeros(1)])
