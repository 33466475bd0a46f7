"""POST /v1/chat/completions and /v1/completions: parse, render the prompt, submit, stream or collect.

The two endpoints differ only in how the prompt is made (the checkpoint's chat template, with the
request's tools, or the text as given) and in the response shapes; the rest is shared. A chat
reply to a request with tools goes through server/tools.py's ToolReply, which turns the model's
call blocks into `tool_calls`. Whichever way the client leaves
(closing a stream, or hanging up while a non-streamed reply is generated), the request is
cancelled: the engine aborts it before its next step and frees its blocks.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from engine import Engine, PromptTooLong, RequestError, SamplingParamsError, StructureError, TokenEvent
from server.bridge import Admitted, EngineBridge, Overloaded, OverShare, client_of
from server.choices import Choices
from server.config import ServerConfig
from server.errors import ApiError, bad_request, error_body
from server.limits import BODY_PARSERS, INLINE_BODY_BYTES
from server.logprobs import LogprobShapes
from server.protocol import (
    ChatRequest,
    Generation,
    Limits,
    parse_chat,
    parse_completion,
    parse_json,
    sampling_error,
)
from server.responses import SSE_DONE, Shapes, sse

CLIENT_CLOSED = 499  # nginx's status for a request whose client left first: logged, never received
T = TypeVar("T")


@dataclass(slots=True)
class Service:
    """What the handlers share; `bridge` exists while the server runs (the app's lifespan)."""

    engine: Engine
    config: ServerConfig
    bridge: EngineBridge | None = None
    # bodies parsed on threads at once (see _parsed)
    parsing: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(BODY_PARSERS))
    max_prompt_bytes: int = field(init=False)
    logprob_shapes: LogprobShapes = field(init=False)

    def __post_init__(self) -> None:
        self.max_prompt_bytes = prompt_byte_bound(self.engine)
        tokenizer = self.engine.tokenizer
        decode = tokenizer.decode
        self.logprob_shapes = LogprobShapes(
            lambda token: decode([token], skip_special_tokens=False), tokenizer.token_bytes
        )

    def end_all(self) -> None:
        """End every request in flight, each with its final event: the drain timeout has passed."""
        if self.bridge is not None:
            self.bridge.abort_all()


def prompt_byte_bound(engine: Engine) -> int:
    """The most bytes of prompt text that could still fit the context, so a longer text is refused
    before the tokenizer spends seconds on it (holding the GIL, so the whole server waits).

    Each token of an encoding stands for at most as many bytes of the text as the vocabulary's
    longest token decodes to, so text longer than max_model_len times that needs more tokens than
    the context holds. This is sound for tokenizers that do not delete text before encoding, as
    LFM2's byte-level BPE does not (no normalizer); a decoded partial character counts as the three
    bytes of U+FFFD, which only loosens the bound."""
    decode = engine.tokenizer.decode
    vocab = range(engine.tokenizer.vocab_size)
    longest = max(len(decode([i], skip_special_tokens=False).encode()) for i in vocab)
    return engine.max_model_len * max(1, longest)


async def chat_completions(request: Request) -> Response:
    service: Service = request.app.state.service
    chat = await _parsed(service, await read_body(request, service.config.max_body_bytes), parse_chat)
    tools = chat.tools.tools if chat.tools is not None else None
    text = await run_in_threadpool(_render_chat, service.engine, chat.messages, tools)
    ids = await run_in_threadpool(_encode, service, text, "messages", False)
    return await _generate(request, service, chat, ids, chat=True)


async def completions(request: Request) -> Response:
    service: Service = request.app.state.service
    job = await _parsed(service, await read_body(request, service.config.max_body_bytes), parse_completion)
    prompt = job.prompt
    if isinstance(prompt, str):
        prompt = await run_in_threadpool(_encode, service, prompt, "prompt", True)
    return await _generate(request, service, job, prompt, chat=False)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than `limit` bytes (413 past it)."""
    too_large = ApiError(413, f"the request body is larger than {limit} bytes")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise too_large
    except ClientDisconnect:  # nobody to answer, and nothing went wrong here: no log line either
        raise ApiError(CLIENT_CLOSED, "the client hung up before sending the whole body") from None
    return bytes(body)


async def _parsed(service: Service, body: bytes, parse: Callable[[dict[str, Any], Limits], T]) -> T:
    """The body parsed and checked by `parse`. A big one is parsed on a thread, one at a time: a 4 MiB
    body of a million small values takes a second to parse and check, which on the event loop would
    hold every other client (/health included) for that second, and several at once for several."""
    if len(body) <= INLINE_BODY_BYTES:
        return parse(parse_json(body), service.config.limits)
    async with service.parsing:
        return await run_in_threadpool(lambda: parse(parse_json(body), service.config.limits))


def _render_chat(engine: Engine, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """The conversation as the checkpoint's template renders it (runs in a thread: templates are code)."""
    try:
        return engine.tokenizer.render_chat(messages, tools=tools)
    except ValueError as exc:  # model.errors.ChatTemplateError: the template's own message
        raise bad_request(f"the chat template refused the messages: {exc}", "messages") from None


def _encode(service: Service, text: str, param: str, special: bool) -> list[int]:
    """The prompt's ids, unless the text is too long to fit whatever its tokens (runs in a thread).

    ``special``: the tokenizer's own additions (LFM2's BOS) go around the text, as a completion
    prompt gets them from vLLM and from transformers' ``tokenizer(prompt)``; a rendered chat has
    them from its template already."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > service.max_prompt_bytes:
        context = service.engine.max_model_len
        message = (
            f"the prompt is {size} bytes: more than this model's context of {context} tokens can hold "
            f"(at most {service.max_prompt_bytes} bytes)"
        )
        raise ApiError(400, message, param, "context_length_exceeded")
    return service.engine.tokenizer.encode(text, add_special_tokens=special)


def _check_prompt(engine: Engine, ids: list[int], param: str) -> None:
    """The engine's prompt rules (Engine.check_prompt), checked before a response starts: a stream
    never begins with an error."""
    try:
        engine.check_prompt(ids)
    except PromptTooLong as exc:
        raise ApiError(400, str(exc), param, "context_length_exceeded") from None
    except RequestError as exc:
        raise bad_request(str(exc), param) from None


async def _generate(
    request: Request, service: Service, job: Generation, ids: list[int], chat: bool
) -> Response:
    config = service.config
    if job.model is not None and job.model != config.model_name:
        message = f"the model `{job.model}` does not exist; this server has `{config.model_name}`"
        raise ApiError(404, message, "model", "model_not_found")
    _check_prompt(service.engine, ids, "messages" if chat else "prompt")
    try:
        service.engine.check_params(job.params)
    except SamplingParamsError as exc:
        raise sampling_error(exc) from None
    assert service.bridge is not None, "the app's lifespan starts the bridge"
    try:
        stream = service.bridge.submit(ids, job.params, job.n, client_of(request.client))
    except Overloaded:
        message = "the server is overloaded: too many requests are waiting; retry shortly"
        raise ApiError(503, message, headers={"Retry-After": "1"}) from None
    except OverShare:
        message = (
            f"this client already has {service.bridge.per_client} requests running or waiting, its share "
            "of the server; retry once one has finished"
        )
        raise ApiError(429, message, code="rate_limit_exceeded", headers={"Retry-After": "1"}) from None
    events = await _unless_refused(stream, job.structure_param)
    shapes = Shapes(config.model_name, chat, include_usage=job.stream and job.include_usage)
    tools = job.tools if isinstance(job, ChatRequest) else None
    logprob_shapes = None if job.params.logprobs is None else service.logprob_shapes
    choices = Choices(job.n, chat, logprob_shapes, service.engine.stop_token_ids(job.params), tools)
    if job.stream:
        headers = {"Cache-Control": "no-cache"}
        body = _events(stream, events, shapes, choices)
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)
    try:
        collected = await _collect_unless_disconnected(request, events, choices)
    finally:
        stream.cancel()
    if not collected:
        return Response(status_code=CLIENT_CLOSED)
    failed = next((event for event in choices.finals.values() if event.finish_reason == "error"), None)
    if failed is not None:
        raise ApiError(500, f"generation failed: {failed.error}")
    if any(event.finish_reason == "abort" for event in choices.finals.values()):  # only a shutdown aborts
        message = "the server is shutting down and stopped this reply before it was finished; retry"
        raise ApiError(503, message, headers={"Retry-After": "1"})
    return JSONResponse(shapes.completion(choices.choices(), choices.metrics()))


async def _unless_refused(stream: Admitted, structure_param: str | None) -> AsyncIterable[TokenEvent]:
    """The request's events; a 400 naming the field instead if the engine refused its structure.

    The engine compiles a structure when the request enters it, so a constrained request waits for
    its first event before a response starts: a stream never begins with an error it could have been."""
    if structure_param is None:
        return stream
    first = await anext(aiter(stream))
    if first.rejected_by is not None and issubclass(first.rejected_by, StructureError):
        raise bad_request(f"{structure_param}: {first.error}", structure_param)

    async def replay() -> AsyncIterator[TokenEvent]:
        yield first
        async for event in stream:
            yield event

    return replay()


async def _events(
    stream: Admitted, events: AsyncIterable[TokenEvent], shapes: Shapes, choices: Choices
) -> AsyncIterator[bytes]:
    """The SSE stream. Starlette cancels it when the client disconnects; `finally` then aborts the request."""
    try:
        if shapes.chat:
            for index in range(choices.n):
                yield sse(shapes.chunk("", role=True, index=index))
        async for event in events:
            if event.finish_reason == "error":
                yield sse(error_body(500, f"generation failed: {event.error}"))
                break
            index, reply = event.index, choices.replies[event.index]
            logprobs = choices.logprobs(event)
            if reply is None and (event.text or (logprobs is not None and event.token_ids)):
                yield sse(shapes.chunk(event.text, index=index, logprobs=logprobs))
            if reply is not None:
                for delta in reply.feed(event.text):
                    yield sse(shapes.delta_chunk(delta, index=index))
                if logprobs is not None and event.token_ids:  # the tokens' logprobs, beside the parsed deltas
                    yield sse(shapes.delta_chunk({}, index=index, logprobs=logprobs))
            if event.finished:
                choices.finals[index] = event
                reason = event.finish_reason
                if reply is not None:
                    for delta in reply.finish():
                        yield sse(shapes.delta_chunk(delta, index=index))
                    reason = reply.finish_reason(reason)
                yield sse(shapes.chunk("", reason, index=index))
        if shapes.include_usage and len(choices.finals) == choices.n:
            yield sse(shapes.usage_chunk(choices.metrics()))
        yield SSE_DONE
    finally:
        stream.cancel()


async def _collect_unless_disconnected(
    request: Request, stream: AsyncIterable[TokenEvent], choices: Choices
) -> bool:
    """Collect every choice's events into ``choices``; False if the client hung up first."""
    collected = False
    async with anyio.create_task_group() as group:
        group.start_soon(_cancel_on_disconnect, request, group.cancel_scope)
        async for event in stream:
            choices.add(event)
        collected = True
        group.cancel_scope.cancel()
    return collected


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    """Waits for the client to hang up (the body is read by now, so nothing else arrives), then cancels."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
