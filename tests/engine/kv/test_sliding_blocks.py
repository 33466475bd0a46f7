"""The sliding-window pool's bookkeeping (LFM3): blocks outside every window released, a bounded hold
per request, prefix matches that resume only where the window before them is cached, sizing."""

from __future__ import annotations

import pytest

from engine.core.config import EngineConfig
from engine.kv.block_manager import RELEASED, BlockManager
from model.arch.cache import HybridCache
from model.arch.lfm3_config import Lfm3Config
from model.tiny.lfm3 import TINY_LFM3_CONFIGS

BS, WINDOW = 4, 10  # the next query at p reads p - 9 .. p: at most ceil(9 / 4) + 1 = 4 blocks held
HELD = -(-(WINDOW - 1) // BS) + 1


def manager(num_blocks: int = 64, sliding_blocks: int = 12, max_num_seqs: int = 2) -> BlockManager:
    return BlockManager(
        num_blocks, BS, max_num_seqs, True, num_sliding_blocks=sliding_blocks, sliding_window=WINDOW
    )


def step(bm: BlockManager, request, num_tokens: int) -> None:
    """What the scheduler does around one step that computes `num_tokens` more tokens."""
    assert bm.allocate(request, request.num_computed_tokens + num_tokens)
    request.num_computed_tokens += num_tokens
    bm.register_full_blocks(request)
    bm.release_out_of_window(request)


def test_blocks_wholly_before_the_window_are_released_step_by_step(new_request):
    bm = manager()
    a = new_request(list(range(20, 120)))
    step(bm, a, 30)  # a 30-token chunk holds all 8 of its blocks while it runs, then drops to the window
    assert a.sliding_table[:5] == [RELEASED] * 5 and RELEASED not in a.sliding_table[5:]
    for _ in range(60):
        step(bm, a, 1)
        held = [b for b in a.sliding_table if b != RELEASED]
        assert len(held) <= HELD and bm.sliding.num_used == len(held)
        first_needed = (a.num_computed_tokens - WINDOW + 1) // BS
        assert all(b == RELEASED for b in a.sliding_table[:first_needed])
        assert RELEASED not in a.sliding_table[first_needed:]
    assert len(a.block_table) == len(a.sliding_table) == -(-a.num_computed_tokens // BS)
    bm.free(a)
    assert bm.sliding.num_used == 0 and bm.num_used_blocks == 0


def test_a_prefix_resumes_with_the_full_prefix_but_only_its_last_windows_sliding_blocks(new_request):
    bm = manager()
    a = new_request(list(range(20, 60)))  # 40 tokens: 10 full blocks
    step(bm, a, 40)
    bm.free(a)
    b = new_request([*range(20, 58), 7, 8, 9])  # shares 38 tokens: 9 full blocks
    assert bm.match_prefix(b) == 36
    assert len(b.block_table) == 9
    first = (36 - WINDOW + 1) // BS  # positions 27..35 are blocks 6, 7, 8
    assert b.sliding_table[:first] == [RELEASED] * first and RELEASED not in b.sliding_table[first:]
    assert b.sliding_start == first and len(b.sliding_table) == 9


def test_a_prefix_whose_window_is_not_cached_backs_off_to_the_longest_one_that_is(new_request):
    """Least recently released goes first, so a tail can be evicted while an earlier window, touched
    since by another request, is still cached: the match stops there."""
    bm = manager(sliding_blocks=10)
    text = list(range(20, 60))
    a = new_request(text)
    for _ in range(10):  # 4 tokens a step: each sliding block released once the window passes it
        step(bm, a, 4)
    bm.free(a)  # every sliding block cached now: 0..6 released in order, then the window 9, 8, 7
    other = new_request([*text[:28], 5, 6, 7, 8, 9])
    assert bm.match_prefix(other) == 28  # takes the window before 28 (blocks 4..6) again
    bm.acquire_slot(other)
    other.num_computed_tokens = 28
    step(bm, other, 4)
    bm.free(other)  # 4..6 are the most recently released now
    filler = new_request(list(range(300, 330)))
    assert bm.allocate(filler, 24)  # six more sliding blocks: evicts 1, 2, 3, 9, 8, 7
    b = new_request([*text, 1])
    assert bm.match_prefix(b) == 28  # windows before 40, 36 and 32 lack block 7; the one before 28 is whole
    assert len(b.block_table) == 7 and b.sliding_table[:4] == [RELEASED] * 4
    bm.free(b)
    bm.free(filler)
    assert bm.sliding.num_used == 0


def test_allocation_stops_where_the_sliding_pool_runs_dry(new_request):
    bm = manager(num_blocks=64, sliding_blocks=6)
    a = new_request(list(range(20, 120)))
    assert bm.max_tokens_allocatable(a) == 6 * BS
    assert not bm.allocate(a, 7 * BS) and a.block_table == [] and a.sliding_table == []
    assert bm.allocate(a, 6 * BS) and bm.num_free_blocks == 58 and bm.sliding.num_free == 0


def lfm3_config(**fields) -> Lfm3Config:
    return Lfm3Config(**{**TINY_LFM3_CONFIGS["lfm3"], "vocab_size": 512, "intermediate_size": 128, **fields})


def test_the_sliding_pool_comes_out_of_the_memory_budget_first_and_does_not_grow_with_it():
    model = lfm3_config()
    small = EngineConfig(dtype="float32", kv_cache_memory_mb=1).resolve(model)
    large = EngineConfig(dtype="float32", kv_cache_memory_mb=64).resolve(model)
    sliding_bytes = HybridCache.bytes_per_sliding_block(model, 16, small.torch_dtype)
    full_bytes = HybridCache.bytes_per_block(model, 16, small.torch_dtype)
    assert small.num_sliding_blocks == large.num_sliding_blocks > 0
    assert small.num_kv_blocks == (2**20 - small.num_sliding_blocks * sliding_bytes) // full_bytes
    assert large.num_kv_blocks > 60 * small.num_kv_blocks
    held = -(-(model.sliding_window - 1) // 16) + 1
    assert small.num_sliding_blocks >= small.max_num_seqs * (held + 1) + small.max_num_batched_tokens // 16


def test_a_sliding_pool_too_small_for_one_window_is_refused_and_lfm2_has_none():
    model = lfm3_config(sliding_window=33)  # 32 past positions: 2 blocks of 16, 3 when misaligned
    with pytest.raises(ValueError, match="num_sliding_blocks must be > 3"):
        EngineConfig(num_sliding_blocks=3, dtype="float32").resolve(model)
    assert EngineConfig(num_sliding_blocks=4, dtype="float32").resolve(model).num_sliding_blocks == 4
    assert (
        EngineConfig(dtype="float32")
        .resolve(lfm3_config(layer_types=["conv", "full_attention"] * 3))
        .num_sliding_blocks
        == 0
    )
