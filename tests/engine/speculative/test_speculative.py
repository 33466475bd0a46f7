"""Speculative decoding is lossless: greedy tokens are the same with n-gram drafts on and off,
under batching, chunked prefill, prefix-cache hits and preemption, on LFM2, LFM2-MoE and LFM3.

Each run also asserts that drafts were both accepted and rejected: otherwise the comparison
would not exercise verification or rollback."""

from __future__ import annotations

import pytest

from engine import SamplingParams
from tests.engine.conftest import random_prompt

MAX_TOKENS = 32
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def echo_prompts(engine, seed: int) -> list[list[int]]:
    """Prompts P + C + P, C the greedy reply to P: tiny random models mostly repeat C after the
    second P (drafts accepted) but stray on some (drafts rejected); two plain prompts besides."""
    firsts = [random_prompt(n, seed * 100 + i) for i, n in enumerate([20, 9, 33, 14])]
    replies = generate(engine, firsts)
    plain = [random_prompt(n, seed * 100 + 50 + i) for i, n in enumerate([45, 3])]
    return [p + c + p for p, c in zip(firsts, replies, strict=True)] + plain


def generate(engine, batch: list[list[int]]) -> list[list[int]]:
    return [out.token_ids for out in engine.generate(batch, GREEDY)]


SCHEDULES = {
    "batched": {"max_num_seqs": 4, "max_num_batched_tokens": 64},
    "chunked": {"max_num_seqs": 3, "max_num_batched_tokens": 24, "block_size": 4},
    "preempting": {"max_num_seqs": 4, "max_num_batched_tokens": 48, "block_size": 8, "num_kv_blocks": 24},
}


@pytest.mark.parametrize("preset", ["default", "moe", "lfm3"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_greedy_tokens_are_identical_with_speculation_on_and_off(
    preset, schedule, tiny_ckpt_factory, make_engine
):
    path = tiny_ckpt_factory(preset)
    config = SCHEDULES[schedule]
    plain_engine = make_engine(path, speculative="off", **config)
    batch = echo_prompts(plain_engine, seed=1)
    plain = generate(plain_engine, batch)
    engine = make_engine(path, speculative="ngram", **config)
    assert generate(engine, batch) == plain
    metrics = engine.metrics
    assert 0 < metrics.spec_accepted_tokens < metrics.spec_draft_tokens  # accepted and rejected drafts
    assert engine.block_manager.num_used_blocks == 0
    if schedule == "preempting":
        assert metrics.preemptions > 0


@pytest.mark.parametrize("preset", ["default", "moe", "lfm3"])
def test_prefix_cache_hits_keep_greedy_tokens_identical(preset, tiny_ckpt_factory, make_engine):
    """A second round of the same conversations resumes from cached blocks written while drafting."""
    path = tiny_ckpt_factory(preset)
    plain_engine = make_engine(path, speculative="off", max_num_seqs=4)
    spec_engine = make_engine(path, speculative="ngram", max_num_seqs=4)
    batch = echo_prompts(plain_engine, seed=2)
    first = generate(plain_engine, batch)
    assert generate(spec_engine, batch) == first
    follow_up = [prompt + reply + prompt[:9] for prompt, reply in zip(batch, first, strict=True)]
    assert generate(spec_engine, follow_up) == generate(plain_engine, follow_up)
    assert spec_engine.metrics.cached_prompt_tokens > 0
    assert 0 < spec_engine.metrics.spec_accepted_tokens < spec_engine.metrics.spec_draft_tokens


def test_speculation_off_drafts_nothing(tiny_ckpt, make_engine):
    engine = make_engine(tiny_ckpt, speculative="off")
    generate(engine, echo_prompts(engine, seed=3))
    assert engine.metrics.spec_draft_tokens == engine.metrics.spec_drafts == 0
