"""A request's life inside the engine: its tokens, its counters, its cache addresses. No text.

    WAITING --schedule--> RUNNING --stop / max_tokens--> FINISHED_STOPPED / FINISHED_LENGTH
       ^                    |  \\--abort / step error--> FINISHED_ABORTED / FINISHED_ERROR
       |                 blocks ran out
       +--- PREEMPTED <-----+        (blocks freed; on resume prompt + generated are recomputed)

`token_ids` is the prompt followed by every generated token; `num_computed_tokens` of them have
their KV and conv state in the cache. The scheduler moves `num_computed_tokens` forward; the
engine appends sampled tokens. A preempted request keeps `token_ids`, so after recomputing it
samples the next token as if nothing had happened: no token is lost or emitted twice.

Text (detokenizing, stop strings, deltas) is engine/loop/output.py's job: the scheduler and the block
manager share this plain state and never pay for text they do not read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.core.conv_rows import ZERO_ROW
from engine.core.drafting import DraftState
from engine.core.metrics import RequestMetrics
from engine.core.sampling_params import SamplingParams

# the scheduler shares this state and imports no torch (tests/engine/speculative/test_proposals.py)
if TYPE_CHECKING:
    import torch

    from engine.core.logit_bias import LogitBias
    from engine.core.structure import RequestGrammar


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"

    @property
    def is_finished(self) -> bool:
        return self.name.startswith("FINISHED")

    @property
    def finish_reason(self) -> str | None:
        """The API's finish_reason string ("stop" | "length" | "abort" | "error"), None while unfinished."""
        return self.value if self.is_finished else None


@dataclass(slots=True, eq=False)
class Request:
    """One generation request; identity semantics (eq=False) so it can key dicts and sets."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival: int  # admission order: FCFS and "preempt the newest" compare this
    max_tokens: int  # params.max_tokens capped by the context left after the prompt
    stop_token_ids: frozenset[int]
    generator: torch.Generator
    metrics: RequestMetrics
    tag: object = None
    token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chain hash of each full, computed block
    sliding_table: list[int] = field(default_factory=list)  # sliding-window layers' blocks (-1: released)
    sliding_start: int = 0  # sliding_table[:sliding_start] are all released
    conv_slot: int | None = None  # running conv-state row while RUNNING
    conv_src_row: int = ZERO_ROW  # row holding the conv state before token num_computed_tokens
    error: str | None = None  # why the engine failed it (FINISHED_ERROR)
    drafting: DraftState = field(default_factory=DraftState)  # how much it may draft (drafting.py)
    # drafts proposed for its next decode step to verify (the runner's); the scheduler trims them
    spec_token_ids: list[int] = field(default_factory=list)
    logit_bias: LogitBias | None = None  # params.logit_bias as tensors, built once
    index: int = 0  # which of the n samples of its prompt this is (Engine.add_request's n)
    # the other samples of its prompt, waiting for it to compute the prompt they share (loop/branches.py)
    branches: list[Request] = field(default_factory=list)
    grammar: RequestGrammar | None = None  # its structure's matcher (engine/structured/), None: unconstrained

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_token_ids)

    # ------------------------------------------------------------------ token counts
    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_token_ids) :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def phase(self) -> str:
        """ "waiting" | "prefill" | "decode" | "preempted" | "finished", for dashboards."""
        if self.status is RequestStatus.RUNNING:
            return "decode" if self.num_output_tokens and self.num_uncomputed_tokens <= 1 else "prefill"
        return "finished" if self.is_finished else self.status.value

    @property
    def running_slot(self) -> int:
        """``conv_slot`` where it must be held: a scheduled request is running, and the block manager
        gave it a slot when it was admitted."""
        if self.conv_slot is None:
            raise RuntimeError(f"request {self.request_id} holds no conv slot: it is not running")
        return self.conv_slot

    # ------------------------------------------------------------------ generation
    def append_token(self, token_id: int, now: float) -> None:
        """Record a sampled token; a stop token or the length limit finishes the request.

        Stop strings need the text, so engine/loop/output.py decides those after this.
        """
        self.token_ids.append(token_id)
        self.metrics.on_token(now)
        if token_id in self.stop_token_ids:
            self.status = RequestStatus.FINISHED_STOPPED
        elif self.num_output_tokens >= self.max_tokens:
            self.status = RequestStatus.FINISHED_LENGTH
