"""Aborting requests (mid-prefill, mid-decode, at random under load) frees every block and slot."""

from __future__ import annotations

import random

from engine import SamplingParams
from engine.kv.block_manager import BlockManager


def assert_pool_empty(manager: BlockManager) -> None:
    """Nothing referenced: every block is free or held only by the prefix cache."""
    assert manager.num_used_blocks == 0
    assert all(block.ref_count == 0 for block in manager.blocks)
    assert manager.num_free_blocks == manager.num_blocks
    assert sorted(manager.conv_rows.free_slots) == list(range(1, manager.conv_rows.max_num_seqs + 1))


def test_abort_mid_prefill_frees_its_blocks(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt, max_num_batched_tokens=32)
    (prompt,) = prompts([300], seed=7)
    rid = engine.add_request(prompt, SamplingParams(max_tokens=5))
    engine.step()
    engine.step()
    (snap,) = engine.snapshot().requests
    assert snap.phase == "prefill" and snap.computed_prompt_tokens == 64
    out = engine.abort(rid)
    assert out.finished and out.finish_reason == "abort" and out.token_ids == []
    assert not engine.has_unfinished()
    assert_pool_empty(engine.block_manager)
    assert engine.abort(rid) is None  # already gone: a no-op


def test_abort_mid_decode_keeps_the_tokens_so_far_and_frees_its_blocks(tiny_ckpt, make_engine, prompts):
    engine = make_engine(tiny_ckpt)
    (prompt,) = prompts([50], seed=8)
    rid = engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True))
    streamed = [t for _ in range(5) for out in engine.step() for t in out.new_token_ids]
    assert engine.snapshot().requests[0].phase == "decode"
    out = engine.abort(rid)
    assert out.finish_reason == "abort" and out.token_ids == streamed and len(streamed) == 5
    assert_pool_empty(engine.block_manager)


def test_burst_of_100_requests_with_random_cancels_leaks_nothing(tiny_ckpt, make_engine, prompts):
    rng = random.Random(0)
    engine = make_engine(tiny_ckpt, block_size=8, num_kv_blocks=64, max_num_seqs=8, max_num_batched_tokens=64)
    batch = prompts([rng.randint(1, 120) for _ in range(100)], seed=9)
    live: set[str] = set()
    finals: dict[str, str] = {}
    for i, prompt in enumerate(batch):
        params = SamplingParams(temperature=rng.choice([0.0, 0.8]), top_p=0.9, max_tokens=rng.randint(1, 24))
        live.add(engine.add_request(prompt, params, request_id=f"b{i}"))
    while engine.has_unfinished():
        for rid in rng.sample(sorted(live), k=min(len(live), rng.choice([0, 0, 0, 1, 2]))):
            finals[rid] = engine.abort(rid).finish_reason
            live.discard(rid)
        for out in engine.step():
            if out.finished:
                assert out.request_id not in finals, "a request finished twice"
                finals[out.request_id] = out.finish_reason
                live.discard(out.request_id)

    assert len(finals) == 100 and not live
    assert 10 < list(finals.values()).count("abort") < 90
    assert_pool_empty(engine.block_manager)
    # and the engine still computes correctly on the recycled, partly evicted pool
    probe = prompts([70], seed=10)
    greedy = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    fresh = make_engine(tiny_ckpt, enable_prefix_caching=False).generate(probe, greedy)
    assert engine.generate(probe, greedy)[0].token_ids == fresh[0].token_ids
