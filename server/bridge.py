"""From the engine's worker thread to the event loop: one asyncio queue per request, and admission.

    event loop (handlers)                          worker thread (owns the Engine)
    bridge.submit(ids, params) --> worker.submit --> add_request, steps
    async for ev in stream     <-- queue <-- call_soon_threadsafe(on_event)
    stream.cancel()            --> handle.cancel: aborted before the next step, blocks freed

The bridge counts requests (each of a request's n choices) from submit to their final event
(which arrives even when nobody reads the stream any more: a cancelled request still ends with an
"abort" event), and refuses new ones past `capacity` so a crowd gets 503s instead of an unbounded
queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine import EngineWorker, SamplingParams, StreamHandle, TokenEvent
from server.metrics import ServerMetrics


class Overloaded(Exception):
    """The engine already holds `capacity` requests."""


class RequestStream:
    """One request's events on the event loop (those of its n choices, interleaved); iterating ends
    after the final one of the last choice."""

    def __init__(self, queue: asyncio.Queue[TokenEvent], n: int = 1) -> None:
        self._queue = queue
        self.handle: StreamHandle | None = None
        self.finished = False
        self._running = n  # choices whose final event has not arrived

    async def __aiter__(self) -> AsyncIterator[TokenEvent]:
        while not self.finished:
            event = await self._queue.get()
            self._running -= event.finished
            self.finished = self._running == 0
            yield event

    def cancel(self) -> None:
        """Abort the request unless it already ended (safe to call any number of times)."""
        if not self.finished and self.handle is not None:
            self.finished = True
            self.handle.cancel()


class EngineBridge:
    """Submits requests to the worker and hands their events to the event loop; used on the loop only."""

    def __init__(self, worker: EngineWorker, capacity: int, metrics: ServerMetrics) -> None:
        self.worker = worker
        self.capacity = capacity  # running + waiting requests before 503
        self.metrics = metrics
        self.in_flight = 0

    def submit(self, prompt_ids: list[int], params: SamplingParams, n: int = 1) -> RequestStream:
        """Queue a request of ``n`` choices; Overloaded when the engine is full. Call on the event loop."""
        if self.in_flight + n > self.capacity:
            raise Overloaded
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        stream = RequestStream(queue, n)

        def deliver(event: TokenEvent) -> None:  # on the loop, for every event of the request
            self.metrics.observe(event)
            if event.finished:
                self.in_flight -= 1
            queue.put_nowait(event)

        self.in_flight += n
        stream.handle = self.worker.submit(
            prompt_ids, params, on_event=lambda event: loop.call_soon_threadsafe(deliver, event), n=n
        )
        return stream
