"""A worker request's events on an asyncio event loop: the one bridge from the worker thread to asyncio.

    event loop (async code)                         worker thread (owns the Engine)
    worker.stream(prompt, params) --> worker.submit --> add_request, steps
    async for ev in stream        <-- queue <-- loop.call_soon_threadsafe(deliver, ev)
    stream.cancel()               --> handle.cancel: aborted before the next step, blocks freed

Every event crosses to the loop whether or not anyone still iterates (a cancelled request still ends
with its "abort" events), so a caller's `observe` hook sees each request to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from engine.core.events import TokenEvent


class Cancellable(Protocol):
    """The worker's handle on the request (`StreamHandle`): all the stream needs of it."""

    def cancel(self) -> None: ...


Observe = Callable[[TokenEvent], object]  # runs on the loop for every event; what it returns is ignored


class EventStream:
    """One request's events on the loop (those of its n samples, interleaved); iterating ends after
    the final event of the last sample. Create it on the loop (`EngineWorker.stream`)."""

    def __init__(self, n: int = 1, observe: Observe | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._observe = observe
        self._running = n  # samples whose final event has not been read
        self.handle: Cancellable | None = None
        self.finished = False

    def put(self, event: TokenEvent) -> None:
        """Any thread (the worker's `on_event`): hand the event to the loop."""
        self._loop.call_soon_threadsafe(self._deliver, event)

    def _deliver(self, event: TokenEvent) -> None:
        if self._observe is not None:
            self._observe(event)
        self._queue.put_nowait(event)

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
