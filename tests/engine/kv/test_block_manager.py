"""Block manager bookkeeping: refcounts, the chained-hash prefix cache, LRU eviction, conv rows."""

from __future__ import annotations

import pytest

from engine.core.conv_rows import ZERO_ROW
from engine.kv.block_manager import BlockManager

BS = 4


def manager(num_blocks: int = 8, max_num_seqs: int = 2, prefix: bool = True) -> BlockManager:
    return BlockManager(num_blocks, BS, max_num_seqs, enable_prefix_caching=prefix)


def computed(bm: BlockManager, request, num_tokens: int | None = None):
    """Pretend a step computed the request's first `num_tokens` tokens."""
    num_tokens = request.num_tokens if num_tokens is None else num_tokens
    assert bm.allocate(request, num_tokens)
    request.num_computed_tokens = num_tokens
    bm.register_full_blocks(request)
    return request


def test_allocate_on_demand_and_free_returns_every_block(new_request):
    bm = manager()
    a = new_request(list(range(20, 30)))
    assert bm.allocate(a, 3) and len(a.block_table) == 1
    assert bm.allocate(a, 9) and len(a.block_table) == 3
    assert len(set(a.block_table)) == 3 and bm.num_used_blocks == 3
    bm.free(a)
    assert a.block_table == [] and bm.num_used_blocks == 0 and bm.num_free_blocks == 8


def test_allocate_refuses_without_side_effects_when_short(new_request):
    bm = manager(num_blocks=2)
    a = new_request(list(range(20, 30)))
    assert not bm.allocate(a, 9)
    assert a.block_table == [] and bm.num_free_blocks == 2


def test_matching_prefix_shares_blocks_and_resumes_from_the_boundary_snapshot(new_request):
    bm = manager()
    a = computed(bm, new_request(list(range(20, 30))))  # 2 full blocks + 2 tokens
    b = new_request([*range(20, 29), 99, 98])  # shares 9 tokens: 2 full blocks
    assert bm.match_prefix(b) == 2 * BS
    assert b.block_table == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in b.block_table] == [2, 2]
    assert b.conv_src_row == bm.conv_rows.snapshot_row(a.block_table[1])


def test_fully_cached_prompt_backs_off_one_block(new_request):
    bm = manager()
    computed(bm, new_request(list(range(20, 28))))  # exactly 2 full blocks
    b = new_request(list(range(20, 28)))
    assert bm.match_prefix(b) == BS  # the last token must be recomputed to sample from it


def test_blocks_are_cached_only_once_computed(new_request):
    bm = manager()
    a = new_request(list(range(20, 30)))
    assert bm.allocate(a, a.num_tokens)  # allocated, but no step has written them yet
    bm.register_full_blocks(a)
    assert bm.match_prefix(new_request(list(range(20, 30)))) == 0


def test_same_tokens_after_a_different_prefix_do_not_match(new_request):
    bm = manager()
    computed(bm, new_request([1, 2, 3, 4, 5, 6, 7, 8, 9]))
    other = new_request([9, 9, 9, 9, 5, 6, 7, 8, 9])  # block 1 equal, block 0 not
    assert bm.match_prefix(other) == 0 and other.conv_src_row == ZERO_ROW


def test_released_blocks_stay_cached_and_are_evicted_tail_first_only_when_free_list_is_empty(new_request):
    bm = manager(num_blocks=4)
    a = computed(bm, new_request(list(range(20, 29))))  # 3 blocks, 2 of them full and cached
    bm.free(a)
    assert bm.num_used_blocks == 0 and bm.num_cached_blocks == 2 and bm.num_free_blocks == 4
    filler = new_request(list(range(50, 58)))
    assert bm.allocate(filler, 8)  # takes the 2 truly free blocks: nothing evicted yet
    assert bm.num_cached_blocks == 2
    assert bm.allocate(filler, 12)  # free list empty: evicts the least recently released (a's tail)
    assert bm.num_cached_blocks == 1
    again = new_request(list(range(20, 29)))
    assert bm.match_prefix(again) == BS  # a's head block survived


def test_duplicate_prefix_computed_twice_is_cached_once_and_fully_released(new_request):
    bm = manager()
    a = computed(bm, new_request(list(range(20, 26))))
    b = computed(bm, new_request(list(range(20, 26))))  # same prefix computed concurrently
    assert a.block_table[0] != b.block_table[0]
    bm.free(a)
    bm.free(b)
    assert bm.num_used_blocks == 0 and bm.num_cached_blocks == 1 and bm.num_free_blocks == 8


def test_conv_slots_are_distinct_running_rows_and_return_on_free(new_request):
    bm = manager(max_num_seqs=2)
    a, b = new_request([20]), new_request([21])
    bm.acquire_slot(a)
    bm.acquire_slot(b)
    assert {a.conv_slot, b.conv_slot} == {1, 2}
    assert bm.conv_rows.snapshot_row(0) == 3 and bm.conv_rows.num_rows == 1 + 2 + 8
    bm.free(a)
    c = new_request([22])
    bm.acquire_slot(c)
    assert c.conv_slot == 1 and a.conv_slot is None


@pytest.mark.parametrize("length", [4, 9])
def test_prefix_caching_off_never_matches(new_request, length):
    bm = manager(prefix=False)
    bm.free(computed(bm, new_request(list(range(20, 20 + length)))))
    assert bm.match_prefix(new_request(list(range(20, 20 + length)))) == 0
    assert bm.num_cached_blocks == 0
