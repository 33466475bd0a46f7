"""What leaves the engine for one request: the tokens of a step, their text and logprobs, and how it
ended. Plain frozen data (no torch), safe to hand to another thread: the worker's callback, the
asyncio stream, the app's panes and the server all receive these."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.metrics import RequestMetrics


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One emitted token's logprob and the `logprobs` most likely tokens at its position."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One step's news for one request; safe to hand to another thread."""

    request_id: str
    tag: object
    text: str
    token_ids: tuple[int, ...]
    finished: bool
    finish_reason: str | None
    error: str | None
    metrics: RequestMetrics
    index: int = 0  # which of the request's n samples this event is about
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token id, when the request asked for them
    # the error the request was refused with before it entered the engine (StructureError,
    # PromptTooLong, SamplingParamsError...), so a caller can tell bad input apart by type
    rejected_by: type[Exception] | None = None
