"""A test's end of worker streams, through the one consumer API the app uses: `on_event`."""

from __future__ import annotations

import queue
import threading

from engine import EngineWorker, SamplingParams, StreamHandle, TokenEvent
from engine.core.prompts import Prompt

TIMEOUT = 120.0  # a hang guard only; nothing here is timed


class Stream:
    """Collects one request's events as `on_event` delivers them, and the threads that delivered them."""

    def __init__(self) -> None:
        self._events: queue.Queue[TokenEvent] = queue.Queue()
        self.threads: set[str] = set()

    def put(self, event: TokenEvent) -> None:
        self.threads.add(threading.current_thread().name)
        self._events.put(event)

    def next(self, timeout: float = TIMEOUT) -> TokenEvent:
        """The next event, waiting for it."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no event within {timeout} s") from None

    def until_finished(self, timeout: float = TIMEOUT) -> list[TokenEvent]:
        """Every event not yet taken, up to and including the finished one."""
        events = [self.next(timeout)]
        while not events[-1].finished:
            events.append(self.next(timeout))
        return events


def submit(
    worker: EngineWorker, prompt: Prompt, params: SamplingParams | None = None, tag: object = None
) -> tuple[StreamHandle, Stream]:
    stream = Stream()
    return worker.submit(prompt, params, tag, on_event=stream.put), stream


def joined(events: list[TokenEvent]) -> tuple[str, list[int]]:
    """The text and token ids a list of events adds up to."""
    return "".join(e.text for e in events), [t for e in events for t in e.token_ids]
