"""Why the head of the queue waits, as the scheduler decided it: "4/8 running · 4 queued" with free
slots must say what it waits for (KV blocks, the step's token budget, the batch size, a preemption)."""

from __future__ import annotations

from pathlib import Path

from engine.core.sampling_params import SamplingParams
from engine.kv.block_manager import BlockManager
from engine.loop.scheduler import Scheduler
from tests.engine.loop.test_scheduler import step

BS = 4


def scheduler(num_blocks: int = 64, max_num_seqs: int = 4, budget: int = 64) -> Scheduler:
    return Scheduler(BlockManager(num_blocks, BS, max_num_seqs, False), max_num_seqs, budget)


def test_nothing_waiting_gives_no_reason(new_request):
    s = scheduler()
    s.add(new_request([20, 21, 22]))
    step(s)
    assert s.wait_reason == ""


def test_a_full_batch(new_request):
    s = scheduler(max_num_seqs=2)
    for _ in range(3):
        s.add(new_request([20, 21, 22]))
    step(s)
    assert s.wait_reason == "max_batch"


def test_the_step_token_budget_spent_by_a_long_prompt(new_request):
    s = scheduler(budget=16)
    s.add(new_request(list(range(20, 60))))
    s.add(new_request([20, 21]))
    step(s)
    assert len(s.running) == 1 and s.wait_reason == "token_budget"


def test_no_kv_blocks_for_the_next_prompt_although_slots_are_free(new_request):
    s = scheduler(num_blocks=4, max_num_seqs=4)
    s.add(new_request(list(range(20, 32))))  # 12 tokens: 3 of the 4 blocks
    s.add(new_request(list(range(40, 48))))  # needs 2
    step(s)
    assert len(s.running) == 1 and s.wait_reason == "kv_blocks"


def test_a_preemption_this_step(new_request):
    s = scheduler(num_blocks=4, max_num_seqs=2, budget=16)
    s.add(new_request(list(range(20, 27)), max_tokens=8))
    s.add(new_request(list(range(40, 47)), max_tokens=8))
    step(s)
    step(s)
    assert step(s).preempted and s.wait_reason == "preemption"


def test_the_engine_snapshot_carries_the_reason(make_engine, tiny_ckpt: Path) -> None:
    engine = make_engine(tiny_ckpt, max_num_seqs=1)
    for prompt in ([5, 6, 7], [8, 9, 10]):
        engine.add_request(prompt, SamplingParams(max_tokens=2))
    engine.step()
    snap = engine.snapshot()
    assert (snap.running, snap.waiting, snap.wait_reason) == (1, 1, "max_batch")
