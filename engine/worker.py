"""The engine loop on a background thread, and per-request streams for threads and asyncio.

    UI / asyncio threads                         worker thread (owns the Engine)
    ------------------------                     --------------------------------
    submit() / cancel()  --> inbox (deque) ----> drain inbox: add_request / abort
                              + Condition        engine.step()
    StreamHandle  <-- events, on_event(ev) <---- one TokenEvent per RequestOutput
    snapshot()    <-- latest EngineSnapshot <--- published after every step

The worker sleeps on the condition while there is nothing to do (no busy spin) and is woken
by submit, cancel or shutdown. Nothing a caller does can raise inside the loop: bad input
becomes an error event for that request, a failing step fails that batch's requests (see
`Engine.step`), and anything worse fails the live requests but keeps the thread serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from engine.engine import Engine
from engine.metrics import RequestMetrics
from engine.output import RequestOutput
from engine.prompts import Prompt
from engine.sampling_params import SamplingParams
from engine.snapshot import EngineSnapshot

logger = logging.getLogger(__name__)


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

    @classmethod
    def of(cls, out: RequestOutput) -> TokenEvent:
        return cls(
            request_id=out.request_id,
            tag=out.tag,
            text=out.new_text,
            token_ids=tuple(out.new_token_ids),
            finished=out.finished,
            finish_reason=out.finish_reason,
            error=out.error,
            metrics=out.metrics,
        )


EventCallback = Callable[[TokenEvent], None]


class StreamHandle:
    """The caller's end of one request: its events (blocking or async), its result, cancel().

    Each event is handed out once and then dropped, so a long reply costs the handle nothing per
    token once it has been read. With `on_event` the callback is the consumer and nothing is
    queued; without it, events wait in a queue until an iteration takes them, so iteration may
    start after the first tokens arrived and still see them all (one consumer per handle: each
    event goes to whichever iteration takes it first). The final output is kept for `result()`.
    """

    def __init__(self, worker: EngineWorker, request_id: str, tag: object, on_event: EventCallback | None):
        self.request_id = request_id
        self.tag = tag
        self._worker = worker
        self._on_event = on_event
        self._cond = threading.Condition()
        self._unread: deque[TokenEvent] = deque()
        self._final: RequestOutput | None = None
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def finished(self) -> bool:
        return self._final is not None

    def cancel(self) -> None:
        """Abort the request before the worker's next step; its last event has finish_reason "abort"."""
        self._worker.cancel(self.request_id)

    def events(self, timeout: float | None = None) -> Iterator[TokenEvent]:
        """Blocking iteration from a plain thread: the unread events up to and including the final one."""
        self._check_iterable()
        while True:
            with self._cond:
                if not self._cond.wait_for(self._has_news, timeout):
                    raise TimeoutError(f"no event from request {self.request_id} within {timeout} s")
                event = self._unread.popleft() if self._unread else None
            if event is None:
                return  # finished, and the final event was taken before
            yield event
            if event.finished:
                return

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        self._check_iterable()
        return self._aiterate()

    async def _aiterate(self) -> AsyncIterator[TokenEvent]:
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                event = self._unread.popleft() if self._unread else None
                if event is None and self._final is not None:
                    return  # finished, and the final event was taken before
                if event is None:
                    wake = loop.create_future()
                    self._async_waiters.append((loop, wake))
            if event is None:
                await wake
                continue
            yield event
            if event.finished:
                return

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finished; its final RequestOutput."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._final is not None, timeout):
                raise TimeoutError(f"request {self.request_id} did not finish within {timeout} s")
            return self._final

    def _has_news(self) -> bool:
        """An unread event, or the end of the stream (call with the lock held)."""
        return bool(self._unread) or self._final is not None

    def _check_iterable(self) -> None:
        """A handle with a callback queues nothing, so iterating it would wait forever: say so instead."""
        if self._on_event is not None:
            raise RuntimeError(
                f"request {self.request_id} hands its events to its on_event callback; "
                "submit without on_event to iterate them"
            )

    def _deliver(self, out: RequestOutput) -> None:
        """Called on the worker thread (or on submit's thread for a rejected request)."""
        event = TokenEvent.of(out)
        with self._cond:
            if self._on_event is None:
                self._unread.append(event)
            if out.finished:
                self._final = out
            waiters, self._async_waiters = self._async_waiters, []
            self._cond.notify_all()
        for loop, wake in waiters:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is listening any more
                loop.call_soon_threadsafe(_set_done, wake)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                logger.exception("on_event callback of request %s failed", self.request_id)


def _set_done(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class EngineWorker:
    """Runs an Engine on a daemon thread; every public method is thread-safe and non-blocking."""

    def __init__(self, engine: Engine, name: str = "lfm-engine") -> None:
        self.engine = engine
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._cond = threading.Condition()
        self._inbox: deque[Callable[[], None]] = deque()
        self._stopping = False
        self._handles: dict[str, StreamHandle] = {}  # touched only on the worker thread
        self._ids = itertools.count()
        self._snapshot = engine.snapshot()

    def start(self) -> EngineWorker:
        self._thread.start()
        return self

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        tag: object = None,
        on_event: EventCallback | None = None,
    ) -> StreamHandle:
        """Queue a request; never blocks, never raises for bad input (that becomes an error event).

        `on_event` runs on the worker thread for every event: keep it short (post a message).
        After shutdown the request is rejected at once, on the caller's thread.
        """
        handle = StreamHandle(self, f"stream-{next(self._ids)}", tag, on_event)
        if not self._post(lambda: self._start(handle, prompt, params)):
            _reject(handle, "the engine worker has shut down")
        return handle

    def cancel(self, request_id: str) -> None:
        self._post(lambda: self._abort(request_id))

    def snapshot(self) -> EngineSnapshot:
        """The snapshot published after the latest step (a reference swap: no lock needed)."""
        return self._snapshot

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Abort everything in flight (each stream gets its final event) and join the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker thread
    def _post(self, command: Callable[[], None]) -> bool:
        with self._cond:
            if self._stopping:
                return False
            self._inbox.append(command)
            self._cond.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._inbox or self._stopping or self.engine.has_unfinished())
                commands = list(self._inbox)
                self._inbox.clear()
                stopping = self._stopping
            for command in commands:
                command()
            if stopping:
                for request_id in list(self._handles):
                    self._abort(request_id)
                self._snapshot = self.engine.snapshot()
                return
            if self.engine.has_unfinished():
                self._publish(self._step())
            self._snapshot = self.engine.snapshot()

    def _step(self) -> list[RequestOutput]:
        try:
            return self.engine.step()
        except Exception as exc:
            logger.exception("engine step crashed; failing the live requests")
            return self.engine.fail_all(f"internal engine error ({type(exc).__name__}: {exc})")

    def _start(self, handle: StreamHandle, prompt: Prompt, params: SamplingParams | None) -> None:
        try:
            self.engine.add_request(prompt, params, request_id=handle.request_id, tag=handle.tag)
        except Exception as exc:  # bad input: RequestError, SamplingParamsError, or worse
            _reject(handle, str(exc))
            return
        self._handles[handle.request_id] = handle

    def _abort(self, request_id: str) -> None:
        out = self.engine.abort(request_id)
        if out is not None:
            self._publish([out])

    def _publish(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            handle = self._handles.get(out.request_id)
            if handle is None:
                continue
            if out.finished:
                del self._handles[out.request_id]
            handle._deliver(out)


def _reject(handle: StreamHandle, error: str) -> None:
    now = time.monotonic()
    metrics = RequestMetrics(arrival_time=now, prompt_tokens=0, finished_time=now)
    handle._deliver(RequestOutput.rejected(handle.request_id, handle.tag, error, metrics))
