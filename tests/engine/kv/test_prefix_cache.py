"""Prefix caching gives the same tokens as a cold run while skipping the shared prompt blocks.

Equality here also proves the conv snapshots: a request resumed from a cached block starts
from the snapshot row, and a wrong conv state changes the tokens of these peaked tiny models.
For LFM3 it proves the sliding-window pool too: a resumed request reads only the last window's
sliding blocks, cached beside the full ones (engine/kv/block_manager.py).
"""

from __future__ import annotations

import pytest

from engine import SamplingParams

BS = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)


@pytest.fixture(params=["default", "lfm3", "moe"])
def tiny_ckpt(request, tiny_ckpt_factory):
    """Each test on LFM2, on LFM3 (whose 12-position window is shorter than a block here) and on LFM2-MoE."""
    return tiny_ckpt_factory(request.param)


def test_second_turn_prefills_only_its_new_tokens_and_matches_a_cold_run(tiny_ckpt, make_engine, prompts):
    turn1, user2 = prompts([70, 15], seed=3)
    warm = make_engine(tiny_ckpt, block_size=BS)
    reply = warm.generate([turn1], GREEDY)[0]
    turn2 = turn1 + reply.token_ids + user2

    second = warm.generate([turn2], GREEDY)[0]
    cold = make_engine(tiny_ckpt, block_size=BS, enable_prefix_caching=False).generate([turn2], GREEDY)[0]

    assert second.token_ids == cold.token_ids
    computed_in_turn1 = len(turn1) + len(reply.token_ids) - 1  # the last reply token was never fed back
    assert second.metrics.cached_prompt_tokens == computed_in_turn1 // BS * BS
    assert len(turn2) - second.metrics.cached_prompt_tokens <= len(user2) + BS
    assert cold.metrics.cached_prompt_tokens == 0


def test_requests_sharing_a_system_prompt_share_its_blocks(tiny_ckpt, make_engine, prompts):
    system, *users = prompts([100, 3, 30, 1, 57, 12], seed=4)
    batch = [system + user for user in users]
    cold = make_engine(tiny_ckpt, enable_prefix_caching=False).generate(batch, GREEDY)

    warm = make_engine(tiny_ckpt, max_num_seqs=4, max_num_batched_tokens=64)
    first = warm.generate(batch[:1], GREEDY)
    rest = warm.generate(batch[1:], GREEDY)  # all at once, each resuming from the shared blocks

    assert [o.token_ids for o in first + rest] == [o.token_ids for o in cold]
    shared = len(system) // BS * BS
    assert [o.metrics.cached_prompt_tokens for o in rest] == [shared] * len(rest)
    snap = warm.snapshot()
    assert snap.cached_prompt_tokens == shared * len(rest)
    assert snap.prompt_tokens == sum(len(p) for p in batch)
    assert 0 < snap.prefix_hit_rate < 1


def test_concurrent_identical_prompts_match_a_cold_run(tiny_ckpt, make_engine, prompts):
    """Same prefix computed by several requests in one step: cached once, nothing corrupted."""
    (system,) = prompts([75], seed=5)
    batch = [system, system, [*system, 20], system]
    cold = make_engine(tiny_ckpt, enable_prefix_caching=False).generate(batch, GREEDY)
    warm = make_engine(tiny_ckpt, max_num_seqs=4, max_num_batched_tokens=256)
    again = warm.generate(batch, GREEDY) + warm.generate(batch, GREEDY)
    assert [o.token_ids for o in again] == [o.token_ids for o in cold] * 2
    assert warm.block_manager.num_used_blocks == 0
