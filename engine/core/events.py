"""What leaves the engine for one request: the tokens of a step, their text and logprobs, where the
request stands (queued, prefilling, decoding) and how it ended. Plain frozen data (no torch), safe
to hand to another thread: the worker's callback, the asyncio stream, the app's panes, `lfm-chat -p`
and the server all receive these, and the app's remote backend builds them from a server's stream."""

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
    """One step's news for one request; safe to hand to another thread.

    An event with no tokens and a `phase` before "decode" is progress news: the request was
    scheduled and computed a prompt chunk, or was preempted (`Engine.report_progress`, which the
    worker sets).
    `finish_reason`: "stop" | "length" | "abort" | "error".
    """

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
    # where the request stands after this step: "waiting" | "preempted" | "prefill" | "decode" |
    # "finished" (Request.phase); a remote server's stream tells only "decode" and "finished"
    phase: str = "decode"
    prompt_done: int = 0  # prompt tokens computed so far, of metrics.prompt_tokens (prefill progress)
    notice: str = ""  # one line for the reader that is not part of the reply (a retry, a dropped field)
