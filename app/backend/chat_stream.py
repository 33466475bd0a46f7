"""One streamed chat completion from an OpenAI-compatible server, turned into the pane's events.

Why by hand over httpx rather than the `openai` SDK: the SDK retries on its own (hiding 429/503
from the pane), raises on fields a server rejects instead of letting us drop them, and brings
pydantic models per chunk; the SSE here (sse.py) is small. Whatever the server sends, a reply ends
with one final event: a malformed chunk, a line over sse.LINE_BYTES or a reply over REPLY_CHARS
end it with an "error" event that says which.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx

from app.backend.base import OnEvent
from app.backend.http_errors import status_problem
from app.backend.server_text import server_text
from app.backend.sse import Chunk, LineSplitter, StreamFault, parse_line
from app.backend.tool_deltas import CallDeltas
from app.backend.unpack import PIECE, BodyRefused, aunpacked, is_packed
from app.core.reply_parts import THINK_END, THINK_START
from engine import RequestMetrics, TokenEvent

# Fields vLLM, SGLang and llama-server take beyond the OpenAI API; others may refuse them.
EXTENSIONS = ("top_k", "min_p", "repetition_penalty")
RETRIES = 5  # 429/503 are retried this many times, 1, 2, 4... seconds apart
BACKOFF_CAP = 8.0
REPLY_CHARS = 1024 * 1024  # a longer reply ends there, with a notice: ~250k tokens, past any context
ERROR_BODY_BYTES = 64 * 1024  # of an error status's body, this much is read (a message is short)
# A stream compressed although we asked for none (unpack.py) unpacks to at most this: ~25,000
# tokens of SSE. Uncompressed, the network bounds it, and REPLY_CHARS and sse.LINE_BYTES its text.
PACKED_STREAM_BYTES = 4 * 1024 * 1024
# Seconds a stream waits after each read before the next. A read costs the same (~0.25 ms of
# httpx/httpcore on a 2-core Xeon) whatever it holds, and servers write each token apart, so 8
# streams at 50 tok/s took ~10% of a core in reads alone; waiting lets a few tokens arrive together.
# A pane draws at most 15 frames a second, so the text shows no later.
READ_GATHER_SECONDS = 0.05


class Dropped(Exception):
    """The connection ended mid-reply (the server went away, or a proxy cut it)."""


class Refused(Exception):
    """The server answered with an error status; the message is in the user's terms."""


def chat_body(model: str, messages: list[dict[str, str]], sampling: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling,
    }


def rejected(body: str, sent: dict[str, Any]) -> list[str]:
    """The extension fields a 400's message names (e.g. "Extra inputs are not permitted: top_k")."""
    return [name for name in EXTENSIONS if name in sent and name in body]


class ChatStream:
    """Runs one request on the backend's event loop: retries, field drops, SSE, final event."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        request_id: str,
        body: dict[str, Any],
        on_event: OnEvent,
        tag: object = None,
    ):
        self.client = client
        self.request_id = request_id
        self.tag = tag
        self.body = body
        self.on_event = on_event
        self.start = time.monotonic()
        self.first: float | None = None
        # The engine's figures, from this client's clock and the server's usage: ttft and the rate
        # come out as the engine computes them (its times are arrival, first and last token).
        self.metrics = RequestMetrics(arrival_time=self.start, prompt_tokens=0)
        self.received = 0  # characters of reply text so far
        self.calls = CallDeltas()  # the reply's tool calls, given as text when it ends
        self.thinking = False  # reasoning deltas came last: the reply's <think> part is open

    def emit(
        self, text: str = "", finish_reason: str | None = None, error: str | None = None, notice: str = ""
    ) -> None:
        """One event. A server tells no token ids and no phase but that it replies, then that it ended."""
        finished = finish_reason is not None
        if finished:
            self.metrics = replace(self.metrics, finished_time=time.monotonic())
        event = TokenEvent(
            request_id=self.request_id,
            tag=self.tag,
            text=text,
            token_ids=(),
            finished=finished,
            finish_reason=finish_reason,
            error=error,
            metrics=self.metrics,
            phase="finished" if finished else "decode",
            notice=notice,
        )
        self.on_event(event)

    def fail(self, error: str) -> None:
        self.emit(finish_reason="error", error=error)

    async def run(self) -> None:
        """Every ending is one final event, whatever was raised; only a cancel is raised on, after
        its "abort" event, so the task ends as cancelled."""
        try:
            reason = await self._attempts()
        except asyncio.CancelledError:
            self.emit(finish_reason="abort")
            raise
        except Dropped as exc:
            self.fail(f"the connection dropped mid-reply ({exc})")
        except (Refused, StreamFault, BodyRefused) as exc:
            self.fail(str(exc))
        except httpx.HTTPError as exc:
            where = self.client.base_url
            said = server_text(exc)  # h11's messages can quote the server's bytes
            self.fail(f"cannot reach the server at {where} ({said})")
        except Exception as exc:  # a bug here must still end the reply, not leave the pane waiting
            self.fail(f"the reply failed: {type(exc).__name__}: {server_text(exc)}")
        else:
            if block := self.calls.as_text():
                self.emit(text=block)
            self.emit(finish_reason=reason)

    async def _attempts(self) -> str:
        for attempt in range(RETRIES + 1):
            async with self.client.stream("POST", "/v1/chat/completions", json=self.body) as response:
                if response.status_code == 200:
                    return await self._read(aunpacked(response, stream_cap(response), "the server's reply"))
                text = (await error_body(response)).decode("utf-8", "replace")
                if response.status_code in (400, 422) and (names := rejected(text, self.body)):
                    self.body = {k: v for k, v in self.body.items() if k not in names}
                    self.emit(notice=f"The server does not take {', '.join(names)}: sent without.")
                    continue
                if response.status_code in (429, 503) and attempt < RETRIES:
                    wait = min(BACKOFF_CAP, 2.0**attempt)
                    self.emit(
                        notice=f"The server is busy ({response.status_code}): retrying in {wait:.0f} s."
                    )
                    await asyncio.sleep(wait)
                    continue
                raise Refused(status_problem(response.status_code, text, str(self.client.base_url)))
        raise Refused("the server kept refusing this request")

    async def _read(self, received: AsyncIterator[bytes]) -> str:
        """The SSE lines: text deltas as they come, usage from the last chunk, then the finish reason."""
        reason = None
        lines = LineSplitter()
        try:
            async for data in received:
                for line in filter(None, lines.feed(data)):  # blank lines (event ends) carry nothing
                    chunk = parse_line(line)
                    if chunk is not None and chunk.done:
                        return reason or "stop"
                    if chunk is not None:
                        reason = self._take(chunk) or reason
                await asyncio.sleep(READ_GATHER_SECONDS)
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout) as exc:
            raise Dropped(type(exc).__name__) from None
        if reason is None:
            raise Dropped("the stream ended without a finish reason")
        return reason

    def _take(self, chunk: Chunk) -> str | None:
        now = time.monotonic()
        if usage := chunk.usage:
            self.metrics = replace(
                self.metrics,
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_tokens,
                generated_tokens=usage.completion_tokens or self.metrics.generated_tokens,
            )
        if chunk.tool_calls:
            self.calls.add(chunk.tool_calls)
        if (text := self._reply_text(chunk)) or chunk.tool_calls:
            self.received += len(text)
            if self.received + self.calls.size > REPLY_CHARS:
                limit = f"{REPLY_CHARS / (1 << 20):g} MiB"
                raise StreamFault(f"the reply passed {limit} of text; the rest was not read")
            self.first = self.first or now
            generated = self.metrics.generated_tokens + 1  # a chunk is a token on the servers we know
            self.metrics = replace(
                self.metrics, generated_tokens=generated, first_token_time=self.first, last_token_time=now
            )
            if text:
                self.emit(text=text)
        return chunk.finish_reason

    def _reply_text(self, chunk: Chunk) -> str:
        """The chunk as reply text: reasoning deltas become `<think>` text, as a model that writes its
        thinking inline sends it, so the pane shows, folds and keeps both alike."""
        text = ""
        if chunk.reasoning:
            text = chunk.reasoning if self.thinking else THINK_START + chunk.reasoning
            self.thinking = True
        if (chunk.text or chunk.tool_calls) and self.thinking:  # the answer (or a call) begins
            text += THINK_END
            self.thinking = False
        return text + chunk.text


async def error_body(response: httpx.Response) -> bytes:
    """The start of an error status's body: enough for its message, never a whole huge body."""
    body = bytearray()
    # Read stops at ERROR_BODY_BYTES, one piece (at most unpack.PIECE) past it at worst: under the cap.
    async for data in aunpacked(response, ERROR_BODY_BYTES + PIECE, "the server's error"):
        body += data
        if len(body) >= ERROR_BODY_BYTES:
            break
    return bytes(body[:ERROR_BODY_BYTES])


def stream_cap(response: httpx.Response) -> int:
    """Bytes a reply stream may unpack to: PACKED_STREAM_BYTES if compressed, else no byte cap."""
    return PACKED_STREAM_BYTES if is_packed(response) else sys.maxsize
