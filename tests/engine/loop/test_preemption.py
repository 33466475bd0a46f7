"""Preemption under a deliberately tiny KV pool: every request finishes with the tokens it would
have produced alone, and its stream never loses or repeats a token."""

from __future__ import annotations

import pytest

from engine import SamplingParams

MAX_TOKENS = 24
GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.mark.parametrize("preset", ["default", "lfm3", "moe"])
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_tiny_block_budget_preempts_yet_outputs_and_streams_are_exact(
    preset, prefix_caching, tiny_ckpt_factory, make_engine, prompts, reference_greedy
):
    tiny_ckpt = tiny_ckpt_factory(preset)
    batch = prompts([40, 90, 25, 60, 10, 75, 33], seed=6)
    engine = make_engine(
        tiny_ckpt,
        block_size=8,
        num_kv_blocks=20,  # 160 token slots for 7 requests needing up to 114 each
        max_num_seqs=4,
        max_num_batched_tokens=48,
        enable_prefix_caching=prefix_caching,
    )
    for prompt in batch:
        engine.add_request(prompt, GREEDY)
    streamed: dict[str, list[int]] = {}
    finals = {}
    while engine.has_unfinished():
        for out in engine.step():
            streamed.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finished:
                finals[out.request_id] = out

    expected = reference_greedy(tiny_ckpt, batch, MAX_TOKENS)
    outputs = [finals[f"req-{i}"] for i in range(len(batch))]
    assert [o.token_ids for o in outputs] == expected
    assert [streamed[o.request_id] for o in outputs] == expected
    assert engine.snapshot().preemptions > 0
    assert sum(o.metrics.preemptions for o in outputs) == engine.snapshot().preemptions
    assert engine.block_manager.num_used_blocks == 0
