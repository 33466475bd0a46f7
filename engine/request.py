"""A request's life inside the engine: its tokens, its cache addresses, its text, its outputs.

    WAITING --schedule--> RUNNING --stop / max_tokens--> FINISHED_STOPPED / FINISHED_LENGTH
       ^                    |  \\--abort / step error--> FINISHED_ABORTED / FINISHED_ERROR
       |                 blocks ran out
       +--- PREEMPTED <-----+        (blocks freed; on resume prompt + generated are recomputed)

`token_ids` is the prompt followed by every generated token; `num_computed_tokens` of them have
their KV and conv state in the cache. The scheduler moves `num_computed_tokens` forward; the
engine appends sampled tokens. A preempted request keeps `token_ids`, so after recomputing it
samples the next token as if nothing had happened: no token is lost or emitted twice.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from engine.conv_rows import ZERO_ROW
from engine.metrics import RequestMetrics
from engine.sampling_params import SamplingParams
from model.tokenizer import IncrementalDetokenizer


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


@dataclass(slots=True)
class RequestOutput:
    """What a caller sees of a request after a step: everything so far plus this step's delta."""

    request_id: str
    tag: object
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    new_token_ids: list[int]
    new_text: str
    finished: bool
    finish_reason: str | None
    error: str | None
    metrics: RequestMetrics

    @classmethod
    def rejected(cls, request_id: str, tag: object, error: str, metrics: RequestMetrics) -> RequestOutput:
        """The final output of a request that never entered the engine (bad input)."""
        return cls(request_id, tag, [], [], "", [], "", True, "error", error, metrics)


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
    detokenizer: IncrementalDetokenizer | None
    metrics: RequestMetrics
    tag: object = None
    token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chain hash of each full, computed block
    conv_slot: int | None = None  # running conv-state row while RUNNING
    conv_src_row: int = ZERO_ROW  # row holding the conv state before token num_computed_tokens
    text: str = ""
    error: str | None = None
    _reported_tokens: int = 0
    _reported_chars: int = 0

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

    # ------------------------------------------------------------------ generation
    def append_token(self, token_id: int, now: float) -> None:
        """Record a sampled token and decide whether the request is done.

        A stop token ends the request without becoming text; a stop string ends it with the
        text cut just before the string.
        """
        self.token_ids.append(token_id)
        self.metrics.on_token(now)
        if token_id in self.stop_token_ids:
            self._finish_text(RequestStatus.FINISHED_STOPPED)
        elif self._add_text(self.detokenizer.add(token_id) if self.detokenizer else ""):
            self.status = RequestStatus.FINISHED_STOPPED
        elif self.num_output_tokens >= self.max_tokens:
            self._finish_text(RequestStatus.FINISHED_LENGTH)

    def _finish_text(self, status: RequestStatus) -> None:
        """Flush the detokenizer (a half character at the very end) and settle the status."""
        tail = self.detokenizer.flush() if self.detokenizer else ""
        self.status = RequestStatus.FINISHED_STOPPED if self._add_text(tail) else status

    def _add_text(self, delta: str) -> bool:
        """Append text; True if a stop string now occurs, in which case the text ends before it."""
        if not delta:
            return False
        old_len = len(self.text)
        self.text += delta
        starts = [self.text.find(stop, max(0, old_len - len(stop) + 1)) for stop in self.params.stop]
        hits = [i for i in starts if i >= 0]
        if hits:
            self.text = self.text[: min(hits)]
        return bool(hits)

    def _visible_len(self) -> int:
        """Text safe to show: while running, hold back a tail that could start a stop string."""
        if self.is_finished or not self.params.stop:
            return len(self.text)
        held = 0
        for stop in self.params.stop:
            for k in range(min(len(stop) - 1, len(self.text)), held, -1):
                if self.text.endswith(stop[:k]):
                    held = k
                    break
        return len(self.text) - held

    def take_output(self) -> RequestOutput:
        """The output so far, with the delta since the previous call."""
        first_new = self.num_prompt_tokens + self._reported_tokens
        visible = self._visible_len()
        new_text = self.text[self._reported_chars : visible]
        new_ids = self.token_ids[first_new:]
        self._reported_tokens += len(new_ids)
        self._reported_chars = visible
        return RequestOutput(
            request_id=self.request_id,
            tag=self.tag,
            prompt_token_ids=self.prompt_token_ids,
            token_ids=self.output_token_ids,
            text=self.text[:visible],
            new_token_ids=new_ids,
            new_text=new_text,
            finished=self.is_finished,
            finish_reason=self.status.finish_reason,
            error=self.error,
            metrics=self.metrics.copy(),
        )
