"""LFM3 in the engine: conversations many windows long keep the sliding-window pool bounded, resume
exactly from the prefix cache, survive preemption under a tiny window pool, and match transformers."""

from __future__ import annotations

import pytest

from engine import SamplingParams

BS = 4  # the "lfm3" preset's window is 12: a 3-block window, and a reply of 40 tokens spans 3 windows
REPLY = 40
GREEDY = SamplingParams(temperature=0.0, max_tokens=REPLY, ignore_eos=True)


def run_tracking_pools(engine) -> tuple[dict, list]:
    """Step to the end; the final outputs and every step's snapshot."""
    finals, snapshots = {}, []
    while engine.has_unfinished():
        finals.update((out.request_id, out) for out in engine.step() if out.finished)
        snapshots.append(engine.snapshot())
    return finals, snapshots


@pytest.mark.slow
def test_a_conversation_many_windows_long_keeps_the_window_pool_bounded_and_matches_transformers(
    tiny_ckpt_factory, make_engine, prompts, reference_greedy
):
    path = tiny_ckpt_factory("lfm3")
    window = 12
    per_request = -(-window // BS) + 1
    engine = make_engine(path, block_size=BS, max_num_seqs=3, max_num_batched_tokens=24)
    system, *users = prompts([60, 20, 15, 25, 30], seed=11)
    conversation, side = system, prompts([70, 33], seed=12)
    for turn, user in enumerate(users):
        conversation = conversation + user
        ids = [engine.add_request(conversation, GREEDY), *(engine.add_request(p, GREEDY) for p in side)]
        finals, snapshots = run_tracking_pools(engine)
        expected = reference_greedy(path, [conversation, *side], REPLY)
        assert [finals[i].token_ids for i in ids] == expected, f"turn {turn}"
        for snap in snapshots:
            assert snap.sliding_blocks_used <= snap.running * per_request
        assert max(s.kv_blocks_used for s in snapshots) > 3 * max(s.sliding_blocks_used for s in snapshots)
        # turn N+1 resumes where turn N's computed blocks end (its last reply token was never fed
        # back): the window before that point is still cached
        computed_before = len(conversation) - len(user) - 1
        assert finals[ids[0]].metrics.cached_prompt_tokens == (computed_before // BS * BS if turn else 0)
        conversation = conversation + finals[ids[0]].token_ids
    assert len(conversation) > 20 * window
    assert engine.snapshot().sliding_blocks_used == engine.snapshot().kv_blocks_used == 0


@pytest.mark.slow
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_window_pool_barely_larger_than_one_window_preempts_and_recomputes_exactly(
    prefix_caching, tiny_ckpt_factory, make_engine, prompts, reference_greedy
):
    path = tiny_ckpt_factory("lfm3")
    batch = prompts([40, 90, 25, 60, 10], seed=13)
    engine = make_engine(
        path,
        block_size=BS,
        num_sliding_blocks=8,  # one request holds up to 4 between steps, 5 with its next token
        max_num_seqs=3,
        max_num_batched_tokens=12,
        max_prefill_with_decodes=4,  # prompts trickle in beside decodes: three requests grow at once
        max_decode_slowdown=None,  # a fixed prefill cap: the schedule, and so the preemptions, never vary
        enable_prefix_caching=prefix_caching,
    )
    for prompt in batch:
        engine.add_request(prompt, GREEDY)
    finals, snapshots = run_tracking_pools(engine)
    assert [finals[f"req-{i}"].token_ids for i in range(len(batch))] == reference_greedy(path, batch, REPLY)
    assert snapshots[-1].preemptions > 0
    assert max(s.kv_blocks_used for s in snapshots) < snapshots[-1].kv_blocks_total // 2  # not the full pool
    assert snapshots[-1].sliding_blocks_used == 0


def test_bf16_lfm3_batched_tokens_equal_each_prompt_alone(
    tiny_ckpt_factory, make_engine, prompts, native_models
):
    """On every native build, windowed decode rows (a start per row) included: a request's bf16 tokens
    do not depend on what it is batched with, since each row is computed alone.

    Each prompt is one chunk both ways, so only the batch differs. Chunk boundaries may change bf16
    tokens: a chunk attending through SDPA and row by row rounds differently, and the tiny LFM3
    loses twice LFM2's accuracy in bf16 (in transformers too), so near-ties flip; fp32 tests hold
    chunking exact. PyTorch's fallback is left out: SDPA over rows padded to the batch's longest
    context rounds by the batch (LFM2's logits differ there too, its tokens rarely).
    """
    path = tiny_ckpt_factory("lfm3")
    batch = prompts([90, 5, 40, 130, 1, 77], seed=14)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    whole_prompts = {
        "max_num_batched_tokens": 512,
        "max_prefill_with_decodes": 512,
        "max_decode_slowdown": None,
    }
    alone = make_engine(path, dtype="bfloat16", block_size=BS, max_num_seqs=1, **whole_prompts)
    together = make_engine(path, dtype="bfloat16", block_size=BS, max_num_seqs=6, **whole_prompts)
    expected = [alone.generate([prompt], params)[0].token_ids for prompt in batch]
    assert [out.token_ids for out in together.generate(batch, params)] == expected
