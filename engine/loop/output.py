"""Output processing: sampled tokens become text, stop strings end requests, outputs carry deltas.

For each request that sampled a token in a step::

    Request.append_token   token counters; a stop token or the length limit finishes it (request.py)
    detokenize             IncrementalDetokenizer: never half a UTF-8 character
    stop strings           matched on the text, which ends just before the earliest one
    RequestOutput          everything so far, plus what is new since the previous output

While a request runs, a tail of its text that could still become a stop string is held back,
so a stream never shows text it later retracts. Text lives here, not on the Request, as in
vLLM v1's output processor: the scheduler and block manager never see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.events import TokenLogprob
from engine.core.metrics import RequestMetrics
from engine.core.request import Request, RequestStatus
from model.text.tokenizer import IncrementalDetokenizer, Tokenizer


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
    index: int = 0  # which of the n samples of its prompt (Engine.add_request's n)
    # one per token of token_ids when SamplingParams.logprobs asked for them, else None
    logprobs: list[TokenLogprob] | None = None
    new_logprobs: list[TokenLogprob] = field(default_factory=list)  # those of new_token_ids
    rejected_by: type[Exception] | None = None  # what refused it at the door (bad input), if anything
    phase: str = "finished"  # Request.phase after the step: "waiting" | "preempted" | "prefill" | "decode"...
    prompt_done: int = 0  # prompt tokens computed so far (prefill progress), of len(prompt_token_ids)

    @classmethod
    def rejected(
        cls, request_id: str, tag: object, reason: Exception, metrics: RequestMetrics, index: int = 0
    ) -> RequestOutput:
        """The final output of a request that never entered the engine (bad input)."""
        out = cls(request_id, tag, [], [], "", [], "", True, "error", str(reason), metrics, index)
        out.rejected_by = type(reason)
        return out


@dataclass(slots=True)
class _Text:
    """One request's text so far and how much of it (and of its tokens) was already reported."""

    detokenizer: IncrementalDetokenizer
    stop: list[str]
    text: str = ""
    reported_tokens: int = 0
    reported_chars: int = 0
    logprobs: list[TokenLogprob] | None = None  # one per output token, when asked for

    def add(self, delta: str) -> bool:
        """Append text; True if a stop string now occurs, in which case the text ends before it."""
        if not delta:
            return False
        old_len = len(self.text)
        self.text += delta
        starts = [self.text.find(stop, max(0, old_len - len(stop) + 1)) for stop in self.stop]
        hits = [i for i in starts if i >= 0]
        if hits:
            self.text = self.text[: min(hits)]
        return bool(hits)

    def visible_len(self, finished: bool) -> int:
        """Text safe to show: while running, hold back a tail that could start a stop string."""
        if finished or not self.stop:
            return len(self.text)
        held = 0
        for stop in self.stop:
            for k in range(min(len(stop) - 1, len(self.text)), held, -1):
                if self.text.endswith(stop[:k]):
                    held = k
                    break
        return len(self.text) - held


class OutputProcessor:
    """The text side of every live request, from `add` until its final output."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._texts: dict[Request, _Text] = {}

    def add(self, request: Request) -> None:
        detokenizer = IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids)
        logprobs: list[TokenLogprob] | None = None if request.params.logprobs is None else []
        self._texts[request] = _Text(detokenizer, request.params.stop, logprobs=logprobs)

    def append(
        self, request: Request, token_id: int, now: float, logprob: TokenLogprob | None = None
    ) -> None:
        """Record a sampled token (with its logprob, for a request that asks) and settle whether it
        ended the request.

        A stop token ends it without becoming text; a stop string ends it with the text cut just
        before the string; at the end, the detokenizer gives up a half character it held.
        """
        request.append_token(token_id, now)
        text = self._texts[request]
        if text.logprobs is not None and logprob is not None:
            text.logprobs.append(logprob)
        hit = token_id not in request.stop_token_ids and text.add(text.detokenizer.add(token_id))
        if not hit and request.is_finished:
            hit = text.add(text.detokenizer.flush())
        if hit:
            request.status = RequestStatus.FINISHED_STOPPED

    def output(self, request: Request) -> RequestOutput:
        """The output so far, with the delta since the previous call; the final one forgets the request."""
        text = self._texts.pop(request) if request.is_finished else self._texts[request]
        first_new = request.num_prompt_tokens + text.reported_tokens
        visible = text.visible_len(request.is_finished)
        new_text = text.text[text.reported_chars : visible]
        new_ids = request.token_ids[first_new:]
        logprobs = text.logprobs
        new_logprobs = logprobs[text.reported_tokens :] if logprobs is not None else []
        text.reported_tokens += len(new_ids)
        text.reported_chars = visible
        return RequestOutput(
            request_id=request.request_id,
            tag=request.tag,
            prompt_token_ids=request.prompt_token_ids,
            token_ids=request.output_token_ids,
            text=text.text[:visible],
            new_token_ids=new_ids,
            new_text=new_text,
            finished=request.is_finished,
            finish_reason=request.status.finish_reason,
            error=request.error,
            metrics=request.metrics.copy(),
            index=request.index,
            logprobs=list(logprobs) if logprobs is not None else None,
            new_logprobs=new_logprobs,
            phase=request.phase,
            prompt_done=min(request.num_computed_tokens, request.num_prompt_tokens),
        )
