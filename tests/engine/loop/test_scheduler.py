"""Scheduling policy without a model: budget, decode priority, chunking, FCFS, preemption, snapshots."""

from __future__ import annotations

from engine.core.request import RequestStatus
from engine.core.schedule import SchedulerOutput
from engine.kv.block_manager import BlockManager
from engine.loop.scheduler import Scheduler

BS = 4


def scheduler(num_blocks=64, max_num_seqs=4, budget=16, prefix=True) -> Scheduler:
    manager = BlockManager(num_blocks, BS, max_num_seqs, prefix)
    return Scheduler(manager, max_num_seqs, budget)


def step(s: Scheduler, token: int = 99, prefill_cap: int | None = None) -> SchedulerOutput:
    """One step as the engine runs it, minus the model and the text: every sampling chunk yields `token`."""
    out = s.schedule(prefill_cap)
    s.update(out)
    for chunk in out.chunks:
        if chunk.want_logits:
            chunk.request.append_token(token, now=0.0)
            if chunk.request.is_finished:
                s.finish(chunk.request, chunk.request.status)
    return out


def tokens_of(out: SchedulerOutput) -> dict[str, int]:
    return {c.request.request_id: c.num_tokens for c in out.chunks}


def test_long_prompt_is_chunked_under_the_budget_and_samples_only_at_its_end(new_request):
    s = scheduler(budget=16)
    r = new_request(list(range(20, 60)), max_tokens=2)
    s.add(r)
    chunks = [step(s).chunks[0] for _ in range(3)]
    assert [c.num_tokens for c in chunks] == [16, 16, 8]
    assert [c.start for c in chunks] == [0, 16, 32]
    assert [c.want_logits for c in chunks] == [False, False, True]
    assert r.num_output_tokens == 1 and r.num_computed_tokens == 40


def test_decodes_go_first_and_a_long_prompt_takes_the_rest_of_the_budget(new_request):
    s = scheduler(budget=16)
    a = new_request([20, 21], max_tokens=50)
    s.add(a)
    step(s)  # a prefilled, now decoding
    b = new_request(list(range(20, 80)), max_tokens=2)
    s.add(b)
    for _ in range(3):
        out = step(s)
        assert out.chunks[0].request is a and out.chunks[0].is_decode
        assert tokens_of(out) == {a.request_id: 1, b.request_id: 15}
        assert out.num_decode_tokens == 1 and out.num_prefill_tokens == 15


def test_prefill_is_capped_while_streams_decode_and_uncapped_once_they_stop(new_request):
    s = scheduler(budget=16)
    a = new_request([20, 21], max_tokens=4)
    s.add(a)
    step(s, prefill_cap=5)  # a decodes from now on, for 3 more steps
    b = new_request(list(range(20, 60)), max_tokens=2)
    s.add(b)
    capped = [tokens_of(step(s, prefill_cap=5)) for _ in range(3)]
    assert capped == [{a.request_id: 1, b.request_id: 5}] * 3
    assert a.is_finished
    assert tokens_of(step(s, prefill_cap=5)) == {b.request_id: 16}  # alone again: the whole budget


def test_max_num_seqs_caps_running_and_the_queue_is_first_come_first_served(new_request):
    s = scheduler(max_num_seqs=2, budget=16)
    reqs = [new_request([20 + i], max_tokens=3 if i == 0 else 20) for i in range(4)]
    for r in reqs:
        s.add(r)
    assert set(tokens_of(step(s))) == {reqs[0].request_id, reqs[1].request_id}
    while reqs[0].status is not RequestStatus.FINISHED_LENGTH:
        step(s)
    step(s)
    assert reqs[2].status is RequestStatus.RUNNING and reqs[3].status is RequestStatus.WAITING


def test_head_of_queue_is_never_skipped_even_if_a_later_request_would_fit(new_request):
    s = scheduler(num_blocks=6, max_num_seqs=4, budget=64)
    running = new_request(list(range(20, 36)), max_tokens=20)  # 4 of the 6 blocks
    s.add(running)
    step(s)
    big, small = new_request(list(range(50, 62))), new_request([20])  # big needs 3 blocks, 1 is free
    s.add(big)
    s.add(small)
    step(s)
    assert big.status is RequestStatus.WAITING and small.status is RequestStatus.WAITING


def test_blocks_running_out_preempt_the_newest_request_which_later_resumes_intact(new_request):
    s = scheduler(num_blocks=4, max_num_seqs=2, budget=16, prefix=False)
    old, new = new_request(list(range(20, 27)), max_tokens=8), new_request(list(range(40, 47)), max_tokens=8)
    s.add(old)
    s.add(new)
    step(s)  # both prefilled into 2 blocks each (positions 0..6), one token sampled each
    step(s)  # position 7 still fits; now 9 tokens each
    out = step(s)  # both need a third block for position 8: the newest must go
    assert out.preempted == [new] and new.status is RequestStatus.PREEMPTED
    assert new.block_table == [] and new.conv_slot is None and new.num_computed_tokens == 0
    assert new.num_output_tokens == 2  # what it generated is kept, not re-emitted
    assert tokens_of(out) == {old.request_id: 1}
    while old.status is RequestStatus.RUNNING:
        step(s)
    resumed = step(s).chunks[0]  # prompt + generated tokens recomputed in one chunk, then sampled
    assert resumed.request is new and (resumed.start, resumed.num_tokens) == (0, 9) and resumed.want_logits
    assert new.num_output_tokens == 3 and new.metrics.preemptions == 1


def test_a_request_that_cannot_grow_preempts_itself_and_is_not_readmitted_in_that_step(new_request):
    s = scheduler(num_blocks=2, max_num_seqs=2, budget=16, prefix=False)
    r = new_request(list(range(20, 28)), max_tokens=4)
    s.add(r)
    step(s)
    out = step(s)
    assert out.preempted == [r] and out.chunks == []


def test_snapshots_are_taken_at_every_block_boundary_a_chunk_crosses(new_request):
    s = scheduler(budget=10)
    r = new_request(list(range(20, 40)), max_tokens=2)
    s.add(r)
    step(s)  # computes 10 tokens: positions 0..9, boundaries after positions 3 and 7
    chunk = step(s).chunks[0]  # positions 10..19: boundaries after 11, 15, 19
    bm = s.block_manager
    assert chunk.start == 10
    assert chunk.snapshots == [
        (1, bm.conv_rows.snapshot_row(r.block_table[2])),
        (5, bm.conv_rows.snapshot_row(r.block_table[3])),
        (9, bm.conv_rows.snapshot_row(r.block_table[4])),
    ]


def test_cached_prefix_is_skipped_and_the_chunk_starts_from_its_snapshot(new_request):
    s = scheduler(budget=64)
    first = new_request(list(range(20, 31)), max_tokens=1)
    s.add(first)
    step(s)
    second = new_request([*range(20, 31), 5, 6])
    s.add(second)
    chunk = step(s).chunks[0]
    assert (chunk.start, chunk.num_tokens) == (8, 5)  # two cached blocks, then the rest
    assert chunk.conv_src_row == s.block_manager.conv_rows.snapshot_row(second.block_table[1])
    assert s.block_manager.blocks[second.block_table[0]].ref_count == 1  # first finished: only second


def test_finish_frees_everything_for_waiting_and_running_requests(new_request):
    s = scheduler(max_num_seqs=1)
    a, b = new_request([20, 21, 22, 23, 24]), new_request([30, 31])
    s.add(a)
    s.add(b)
    step(s)
    s.finish(a, RequestStatus.FINISHED_ABORTED)
    s.finish(b, RequestStatus.FINISHED_ABORTED)
    assert not s.has_unfinished() and s.block_manager.num_used_blocks == 0
