"""What the scheduler hands the runner for one step: each request's chunk of tokens, and who was
admitted or preempted. Plain data, shared by the scheduler, the runner and the grammar masks."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.request import Request


@dataclass(slots=True)
class ScheduledChunk:
    """One request's share of a step: `num_tokens` tokens starting at position `start`."""

    request: Request
    start: int
    num_tokens: int
    conv_src_row: int
    snapshots: list[tuple[int, int]]  # (offset in chunk, conv row): state after that token is saved
    want_logits: bool  # the chunk ends the known tokens, so the next token is sampled
    drafts: list[int] = field(default_factory=list)  # drafted tokens after the fed one, verified this step
    draft_rows: list[int] = field(default_factory=list)  # conv row keeping the state after token k < d

    @property
    def is_decode(self) -> bool:
        """One generated token fed back, maybe with drafts (not a prompt chunk, not a recompute)."""
        return self.num_tokens - len(self.drafts) == 1 and self.start >= self.request.num_prompt_tokens


@dataclass(slots=True)
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    admitted: list[Request] = field(default_factory=list)

    @property
    def num_decode_tokens(self) -> int:
        return sum(c.is_decode for c in self.chunks)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks if not c.is_decode)

    @property
    def num_draft_tokens(self) -> int:
        return sum(len(c.drafts) for c in self.chunks)
