"""Greedy outputs of many requests batched together equal transformers' `generate` on each alone
(LFM2, LFM3 and LFM2-MoE: LFM3's tiny windows are 5 and 12 positions, so the longer prompts span
dozens; the tiny MoEs' few experts are shared by many tokens of a step)."""

from __future__ import annotations

import pytest
import torch

from engine import SamplingParams

# 1 to 300 tokens: single-token prompts, exact block multiples, and prompts spanning many chunks
LENGTHS = [300, 1, 17, 64, 150, 3, 257, 31, 200, 16, 100, 48, 9, 65]
MAX_TOKENS = 12
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


# the quick loop checks one preset against transformers; the others are slow (docs/TESTING.md)
OTHER_PRESETS = [
    pytest.param(p, marks=pytest.mark.slow) for p in ["lfm2_like", "lfm3", "lfm3_plain", "moe", "moe_plain"]
]


@pytest.mark.parametrize("preset", ["default", *OTHER_PRESETS])
def test_batched_greedy_equals_reference_alone(
    preset, tiny_ckpt_factory, make_engine, prompts, reference_greedy
):
    path = tiny_ckpt_factory(preset)
    batch = prompts(LENGTHS, seed=1)
    engine = make_engine(path, max_num_seqs=4, max_num_batched_tokens=64)
    for prompt in batch:
        engine.add_request(prompt, GREEDY)
    finals, steps = {}, []
    while engine.has_unfinished():
        finals.update((out.request_id, out) for out in engine.step() if out.finished)
        steps.append(engine.snapshot())

    outputs = [finals[f"req-{i}"] for i in range(len(batch))]
    assert [out.token_ids for out in outputs] == reference_greedy(path, batch, MAX_TOKENS)
    assert all(out.finish_reason == "length" for out in outputs)
    # the schedule really was tight: queueing, chunked prompts, and decodes mixed with prefill chunks
    assert max(s.running for s in steps) == 4 and max(s.waiting for s in steps) > 0
    assert max(s.step_tokens for s in steps) == 64
    assert any(s.step_decode_tokens and s.step_prefill_tokens for s in steps)


@pytest.mark.parametrize(  # float32 int4: PyTorch's path, exact integer sums
    ("preset", "quantize"), [("default", "none"), ("default", "int4"), ("lfm3", "none"), ("moe", "none")]
)
def test_outputs_do_not_depend_on_budget_block_size_or_prefix_caching(
    preset, quantize, tiny_ckpt_factory, make_engine, prompts
):
    """Chunk boundaries, block boundaries and cache layout differ; the tokens may not."""
    tiny_ckpt = tiny_ckpt_factory(preset)
    batch = prompts([90, 5, 40, 130, 1, 77], seed=2)
    configs = [
        {"max_num_seqs": 1, "max_num_batched_tokens": 512, "enable_prefix_caching": False},
        {"max_num_seqs": 3, "max_num_batched_tokens": 7, "block_size": 4},
        {"max_num_seqs": 6, "max_num_batched_tokens": 33, "block_size": 32},
    ]
    configs = [{**config, "quantize": quantize} for config in configs]
    results = [[o.token_ids for o in make_engine(tiny_ckpt, **c).generate(batch, GREEDY)] for c in configs]
    assert results[1] == results[0] and results[2] == results[0]


def test_bfloat16_engine_serves_a_mixed_batch_end_to_end(tiny_ckpt, make_engine, prompts):
    """bf16 cache and weights with float32 logits: no dtype seams between cache, model and sampler."""
    engine = make_engine(tiny_ckpt, dtype="bfloat16", max_num_seqs=3, max_num_batched_tokens=32)
    batch = prompts([70, 2, 33, 18], seed=3)
    sampled = SamplingParams(temperature=0.8, seed=1, max_tokens=MAX_TOKENS)
    outs = engine.generate(batch, [GREEDY, sampled] * 2)
    assert engine.runner.cache.k[0].dtype == next(engine.runner.model.parameters()).dtype == torch.bfloat16
    assert [len(o.token_ids) for o in outs[::2]] == [MAX_TOKENS, MAX_TOKENS]
    assert all(o.finished and o.finish_reason in ("stop", "length") for o in outs)
    assert engine.block_manager.num_used_blocks == 0
