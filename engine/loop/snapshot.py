"""What a dashboard sees of the engine: a frozen snapshot, rebuilt after every step.

Another thread may read a snapshot without locks (it never changes). Building one costs the same
however long the queue is: counts are exact, but only the first SNAPSHOT_REQUESTS live requests
are listed (docs/ARCHITECTURE.md says what listing them all cost).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from engine.core.config import EngineConfig
from engine.core.metrics import EngineMetrics
from engine.core.request import Request
from engine.kv.block_manager import BlockManager
from engine.loop.scheduler import Scheduler

SNAPSHOT_REQUESTS = 64  # per-request rows in a snapshot; a dashboard's table shows ~20


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    request_id: str
    tag: object
    phase: str  # "waiting" | "prefill" | "decode" | "preempted"
    prompt_tokens: int
    computed_prompt_tokens: int
    cached_prompt_tokens: int
    generated_tokens: int
    max_tokens: int
    tokens_per_s: float
    ttft: float | None


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """Everything the dashboard shows, frozen at one moment."""

    time: float
    steps: int
    running: int
    waiting: int
    max_num_seqs: int
    step_tokens: int
    step_decode_tokens: int
    step_prefill_tokens: int
    token_budget: int
    step_time: float
    kv_blocks_used: int
    kv_blocks_cached: int
    kv_blocks_total: int
    prefix_hit_rate: float
    cached_prompt_tokens: int
    prompt_tokens: int
    preemptions: int
    tokens_per_s: float
    throughput_history: tuple[float, ...]
    requests: tuple[RequestSnapshot, ...]  # first SNAPSHOT_REQUESTS live ones: running, then waiting
    wait_reason: str = ""  # why the queue's head waits (scheduler.WAIT_REASONS), "" when none waits
    # the sliding-window layers' pool (LFM3), counted as the kv_blocks_* are; 0 for a model without one
    sliding_blocks_used: int = 0
    sliding_blocks_cached: int = 0
    sliding_blocks_total: int = 0
    # speculative decoding: the last step's drafted and accepted tokens, and totals since start
    step_draft_tokens: int = 0
    step_accepted_tokens: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0


def take_snapshot(
    now: float, metrics: EngineMetrics, scheduler: Scheduler, manager: BlockManager, config: EngineConfig
) -> EngineSnapshot:
    """The engine as it stands: running requests, then waiting ones, oldest first."""
    step = metrics.last_step
    sliding = manager.sliding
    live = itertools.islice(itertools.chain(scheduler.running, scheduler.waiting), SNAPSHOT_REQUESTS)
    return EngineSnapshot(
        time=now,
        steps=metrics.steps,
        running=len(scheduler.running),
        waiting=len(scheduler.waiting),
        max_num_seqs=config.max_num_seqs,
        step_tokens=step.tokens,
        step_decode_tokens=step.decode_tokens,
        step_prefill_tokens=step.prefill_tokens,
        token_budget=config.max_num_batched_tokens,
        step_time=step.step_time,
        kv_blocks_used=manager.num_used_blocks,
        kv_blocks_cached=manager.num_cached_blocks,
        kv_blocks_total=manager.num_blocks,
        sliding_blocks_used=sliding.num_used if sliding else 0,
        sliding_blocks_cached=sliding.num_cached if sliding else 0,
        sliding_blocks_total=sliding.num_blocks if sliding else 0,
        prefix_hit_rate=metrics.prefix_hit_rate,
        cached_prompt_tokens=metrics.cached_prompt_tokens,
        prompt_tokens=metrics.prompt_tokens,
        preemptions=metrics.preemptions,
        step_draft_tokens=step.draft_tokens,
        step_accepted_tokens=step.accepted_tokens,
        spec_drafts=metrics.spec_drafts,
        spec_draft_tokens=metrics.spec_draft_tokens,
        spec_accepted_tokens=metrics.spec_accepted_tokens,
        tokens_per_s=metrics.throughput.rate(now),
        throughput_history=metrics.throughput.history(now),
        requests=tuple(request_snapshot(request) for request in live),
        wait_reason=scheduler.wait_reason,
    )


def request_snapshot(request: Request) -> RequestSnapshot:
    return RequestSnapshot(
        request_id=request.request_id,
        tag=request.tag,
        phase=request.phase,
        prompt_tokens=request.num_prompt_tokens,
        computed_prompt_tokens=min(request.num_computed_tokens, request.num_prompt_tokens),
        cached_prompt_tokens=request.metrics.cached_prompt_tokens,
        generated_tokens=request.num_output_tokens,
        max_tokens=request.max_tokens,
        tokens_per_s=request.metrics.tokens_per_s,
        ttft=request.metrics.ttft,
    )
