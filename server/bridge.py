"""Admission between the handlers and the engine's worker: requests in flight, and 503 past capacity.

Events reach the loop through the engine's one asyncio adapter (`EngineWorker.stream`,
engine/event_stream.py). The bridge counts requests (each of a request's n choices) from submit to
their final event (which arrives even when nobody reads the stream any more: a cancelled request
still ends with an "abort" event), and refuses new ones past `capacity` so a crowd gets 503s
instead of an unbounded queue.
"""

from __future__ import annotations

from engine import EngineWorker, EventStream, SamplingParams, TokenEvent
from server.metrics import ServerMetrics


class Overloaded(Exception):
    """The engine already holds `capacity` requests."""


class EngineBridge:
    """Submits requests to the worker and counts them until they end; used on the loop only."""

    def __init__(self, worker: EngineWorker, capacity: int, metrics: ServerMetrics) -> None:
        self.worker = worker
        self.capacity = capacity  # running + waiting requests before 503
        self.metrics = metrics
        self.in_flight = 0

    def submit(self, prompt_ids: list[int], params: SamplingParams, n: int = 1) -> EventStream:
        """Queue a request of ``n`` choices; Overloaded when the engine is full. Call on the event loop."""
        if self.in_flight + n > self.capacity:
            raise Overloaded
        self.in_flight += n
        return self.worker.stream(prompt_ids, params, n=n, observe=self._observe)

    def _observe(self, event: TokenEvent) -> None:  # on the loop, for every event of every request
        self.metrics.observe(event)
        if event.finished:
            self.in_flight -= 1
