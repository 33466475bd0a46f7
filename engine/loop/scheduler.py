"""Decides each step's batch: which requests run, and how many of their tokens.

Policy, in order, under `max_num_batched_tokens` (the token budget) and `max_num_seqs`:

1. Running requests that decode (one token each), oldest first, so streams never stall
   behind a long prompt.
2. Running requests still prefilling (or recomputing after preemption), oldest first, each
   taking what is left of the budget: long prompts are chunked across steps. In a step that
   also decodes, prefill gets at most the `prefill_cap` passed to `schedule` (the engine paces
   it from measured step times, engine/loop/pacing.py), so a long prompt arriving never makes the
   running streams wait much longer than their usual gap.
3. Waiting requests in arrival order (first come, first served: the head of the queue is
   never skipped, so nothing starves). Each first takes its cached prefix, then a chunk.
   None are admitted in a step that had to preempt.

When requests still wait after a step is built, `wait_reason` says why the head of the queue was
not admitted (one of WAIT_REASONS), so a dashboard can explain a queue beside free slots.

When a running request needs a block and none is free (cached blocks count as free: they are
evicted before any request is touched), the newest running request is preempted: its blocks
and slot are freed and it goes back to the queue in arrival order, to be recomputed later.

Speculative decoding (engine/core/drafting.py): the scheduler decides how many drafts each request
may verify; it never makes them. Before each `schedule`, `draft_allowances` says how many each
decoding request may be proposed (its draft length, its length limit, and the rows the step's
decodes leave), the runner's proposer (n-gram or draft model) fills `spec_token_ids`, and
`schedule` trims them to the step: a decoding request adds up to `max_drafts` drafted
tokens after its one fed token, so the step verifies them all (1 + d query rows). Drafts never
preempt anyone and never take the last free block of each running request; `max_drafts` fits
every running request's drafts in the token budget, and a step's drafts together stay within
`draft_rows` (oldest request first; none once the batch is busy), so a full batch spends its rows
on decoding. Greedy output never depends on drafts; a seeded request's draws would, so it drafts
by its own state alone, whatever its batch. A preempted request's proposals are dropped (it is
recomputed, and proposed for again once it decodes). After the step, `update` counts only the
accepted drafts as computed and gives back the blocks the rejected ones took.

The scheduler moves ids and counters only: it imports no torch, touches no tensor and runs no model.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from engine.core.drafting import draft_rows
from engine.core.request import Request, RequestStatus
from engine.core.schedule import ScheduledChunk, SchedulerOutput
from engine.kv.block_manager import BlockManager

# Why the head of the queue waits, in the order they are checked.
WAIT_REASONS = ("preemption", "max_batch", "token_budget", "kv_blocks")


def _arrival(request: Request) -> int:
    return request.arrival


@dataclass(slots=True)
class _Plan:
    """Tokens granted so far in the step being built."""

    budget: int
    draft_rows: int = 0  # drafted tokens this step may still verify (STEP_ROWS less its decodes)
    tokens: dict[Request, int] = field(default_factory=dict)
    drafts: dict[Request, list[int]] = field(default_factory=dict)

    def grant(self, request: Request, num_tokens: int) -> None:
        self.tokens[request] = num_tokens
        self.budget -= num_tokens

    def add_drafts(self, request: Request, drafts: list[int]) -> None:
        self.drafts[request] = drafts
        self.tokens[request] += len(drafts)
        self.budget -= len(drafts)
        self.draft_rows -= len(drafts)

    def revoke(self, request: Request) -> None:
        self.budget += self.tokens.pop(request, 0)
        self.drafts.pop(request, None)


class Scheduler:
    """Owns the waiting and running queues; see the module docstring for the policy."""

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_drafts: int = 0,
    ):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_drafts = max_drafts  # drafted tokens a decoding request may verify per step (0: off)
        self.waiting: list[Request] = []  # sorted by arrival
        self.running: list[Request] = []  # sorted by arrival, so running[-1] is the newest
        self.wait_reason = ""  # after each schedule: one of WAIT_REASONS while requests wait, else ""

    def add(self, request: Request) -> None:
        bisect.insort(self.waiting, request, key=_arrival)

    def add_running(self, request: Request) -> None:
        """Run a request whose tokens are already in the cache (a branch forked from another request's
        prompt, engine/loop/engine.py): it decodes from the next step, as if it had been admitted."""
        request.status = RequestStatus.RUNNING
        bisect.insort(self.running, request, key=_arrival)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def demand(self) -> tuple[int, int]:
        """(running requests decoding, requests waiting for or still in their prompt's prefill)."""
        decoding = sum(r.num_uncomputed_tokens == 1 for r in self.running)
        return decoding, len(self.running) - decoding + len(self.waiting)

    # ------------------------------------------------------------------ one step
    def schedule(self, prefill_cap: int | None = None) -> SchedulerOutput:
        """This step's chunks; `prefill_cap` bounds prompt tokens beside decodes (None: no cap)."""
        out = SchedulerOutput()
        decoding = [r for r in self.running if r.num_uncomputed_tokens == 1]
        plan = _Plan(self.max_num_batched_tokens, draft_rows=draft_rows(len(decoding)))
        prefilling = [r for r in self.running if r.num_uncomputed_tokens > 1]
        for request in decoding:
            if plan.budget == 0:
                break
            if request.status is RequestStatus.RUNNING:
                self._grow_running(request, plan, out)
                if self.max_drafts and request in plan.tokens:
                    self._draft(request, plan)
        if plan.tokens and prefill_cap is not None:  # streams are decoding: keep this step short
            plan.budget = min(plan.budget, prefill_cap)
        for request in prefilling:
            if plan.budget == 0:
                break
            if request.status is RequestStatus.RUNNING:
                self._grow_running(request, plan, out)
        # After a preemption the pool is known to be short: admitting more would only thrash.
        while not out.preempted and self.waiting and plan.budget and len(self.running) < self.max_num_seqs:
            if not self._admit(self.waiting[0], plan):
                break
            out.admitted.append(self.waiting.pop(0))
        self.wait_reason = self._why_waiting(out, plan)
        out.chunks = [
            self._chunk(request, n, plan.drafts.get(request, [])) for request, n in plan.tokens.items()
        ]
        return out

    def _why_waiting(self, out: SchedulerOutput, plan: _Plan) -> str:
        """What stopped admissions this step: the admit loop's conditions, and else `_admit` refusing
        for want of blocks."""
        if not self.waiting:
            return ""
        if out.preempted:
            return "preemption"
        if len(self.running) >= self.max_num_seqs:
            return "max_batch"
        return "kv_blocks" if plan.budget else "token_budget"

    def _draft(self, request: Request, plan: _Plan) -> None:
        """Add `request`'s proposed drafts to its decode chunk, trimmed to its allowance, the budget
        and the free blocks beyond one per running request (so no draft ever makes another request
        preempt)."""
        first = request.num_computed_tokens + 1  # position of the first draft
        reach = self.block_manager.max_tokens_allocatable(request, reserve=len(self.running))
        limit = max(0, min(self._allowance(request, plan.draft_rows), plan.budget, reach - first))
        drafts = request.spec_token_ids[:limit]
        if drafts:
            self.block_manager.allocate(request, first + len(drafts))
            plan.add_drafts(request, drafts)

    def _allowance(self, request: Request, shared_rows: int) -> int:
        """Drafts `request` may verify in a step whose drafts may still take `shared_rows` rows: its
        draft length, what its length limit leaves after the fed token, and the shared rows (a
        seeded request's draws must not depend on its batch: it drafts by its own state alone)."""
        shared = shared_rows if request.params.seed is None else self.max_drafts
        left = request.max_tokens - request.num_output_tokens - 1
        return request.drafting.allowance(request.num_output_tokens, min(self.max_drafts, left, shared))

    def _grow_running(self, request: Request, plan: _Plan, out: SchedulerOutput) -> None:
        """Give `request` a chunk and its blocks, preempting newer requests if the pool is dry."""
        wanted = min(request.num_uncomputed_tokens, plan.budget)
        start = request.num_computed_tokens
        while True:
            reach = min(start + wanted, self.block_manager.max_tokens_allocatable(request))
            if reach > start:
                self.block_manager.allocate(request, reach)
                plan.grant(request, reach - start)
                return
            victim = self.running[-1]
            plan.revoke(victim)
            self._preempt(victim, out)
            if victim is request:
                return

    def _admit(self, request: Request, plan: _Plan) -> bool:
        """Start (or resume) the head of the queue if its cached prefix plus a full chunk fit.

        Unlike a running request, a new one is not squeezed into the last free blocks: it
        would only take the blocks running requests need next and be preempted again.
        """
        manager = self.block_manager
        cached = manager.match_prefix(request)
        reach = min(request.num_tokens, cached + plan.budget)
        if not manager.allocate(request, reach):
            manager.free(request)
            return False
        manager.acquire_slot(request)
        request.num_computed_tokens = cached
        request.status = RequestStatus.RUNNING
        bisect.insort(self.running, request, key=_arrival)
        plan.grant(request, reach - cached)
        return True

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        self.block_manager.free(request)
        request.num_computed_tokens = 0
        request.spec_token_ids = []  # proposed for a state it no longer has; it is recomputed first
        request.status = RequestStatus.PREEMPTED
        request.metrics.preemptions += 1
        self.add(request)
        out.preempted.append(request)

    def _chunk(self, request: Request, num_tokens: int, drafts: list[int]) -> ScheduledChunk:
        """Where the chunk's conv state comes from and which block-boundary states to keep."""
        start = request.num_computed_tokens
        conv_rows = self.block_manager.conv_rows
        snapshots = []
        if self.block_manager.enable_prefix_caching:
            size = self.block_manager.block_size
            first_end = (start // size + 1) * size  # position just past the first boundary
            for end in range(first_end, start + num_tokens + 1, size):
                block_id = request.block_table[end // size - 1]
                snapshots.append((end - 1 - start, self.block_manager.conv_rows.snapshot_row(block_id)))
        return ScheduledChunk(
            request=request,
            start=start,
            num_tokens=num_tokens,
            conv_src_row=request.conv_src_row,
            snapshots=snapshots,
            want_logits=start + num_tokens - len(drafts) == request.num_tokens,
            drafts=drafts,
            draft_rows=[conv_rows.draft_row(request.running_slot, k) for k in range(len(drafts))],
        )

    # ------------------------------------------------------------------ after the step
    def update(self, out: SchedulerOutput, accepted: dict[Request, int] | None = None) -> None:
        """Account for the computed chunks: advance counters (by the fed token and the ``accepted``
        drafts only), give back the blocks rejected drafts took, cache newly full blocks, release
        the sliding-window blocks no later query reads.

        Called after the step's tokens were appended, so a full block's tokens are all known."""
        for chunk in out.chunks:
            request = chunk.request
            kept = (accepted or {}).get(request, 0)
            request.num_computed_tokens += chunk.num_tokens - len(chunk.drafts) + kept
            request.conv_src_row = request.running_slot
            if chunk.drafts:
                request.drafting.record(len(chunk.drafts), kept, request.num_output_tokens)
                self.block_manager.trim(request)
            self.block_manager.register_full_blocks(request)
            self.block_manager.release_out_of_window(request)

    def finish(self, request: Request, status: RequestStatus) -> None:
        """Remove a request for good and free everything it holds."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.block_manager.free(request)
        request.status = status

    def draft_allowances(self) -> dict[Request, int]:
        """How many drafts to propose for each decoding request before the next `schedule`: what
        its policy, its length limit and the rows of that step's decodes allow. `schedule` trims
        them again to its budget and blocks (and its older requests' drafts), so proposing no more
        than this only spares the proposer work."""
        if not self.max_drafts:
            return {}
        decoding = [r for r in self.running if r.num_uncomputed_tokens == 1]
        rows = draft_rows(len(decoding))
        return {request: self._allowance(request, rows) for request in decoding}
