"""The engine loop on a background thread; each request's events leave through its callback.

    caller threads (UI, asyncio, ...)            worker thread (owns the Engine)
    ---------------------------------            --------------------------------
    submit() / cancel()  --> inbox (deque) ----> drain inbox: add_request / abort
                              + Condition        engine.step()
    on_event(ev)         <---------------------- one TokenEvent per RequestOutput, called here
                                                 (tokens, and progress: a prompt chunk, a preemption)
    snapshot()    <-- latest EngineSnapshot <--- published after every step

The worker sleeps on the condition while there is nothing to do (no busy spin) and is woken
by submit, cancel or shutdown. Nothing a caller does can raise inside the loop: bad input
becomes an error event for that request, a failing step fails that batch's requests (see
`Engine.step`), and anything worse fails the live requests but keeps the thread serving.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from engine.core.errors import RequestError
from engine.core.events import TokenEvent
from engine.core.metrics import RequestMetrics
from engine.core.prompts import Prompt
from engine.core.sampling_params import SamplingParams
from engine.loop.branches import branch_id
from engine.loop.engine import Engine
from engine.loop.output import RequestOutput
from engine.loop.snapshot import EngineSnapshot
from engine.worker.event_stream import EventStream, Observe

logger = logging.getLogger(__name__)


def _event(out: RequestOutput) -> TokenEvent:
    """The step's output for one request as the event its caller receives."""
    return TokenEvent(
        request_id=out.request_id,
        tag=out.tag,
        text=out.new_text,
        token_ids=tuple(out.new_token_ids),
        finished=out.finished,
        finish_reason=out.finish_reason,
        error=out.error,
        metrics=out.metrics,
        index=out.index,
        logprobs=tuple(out.new_logprobs),
        rejected_by=out.rejected_by,
        phase=out.phase,
        prompt_done=out.prompt_done,
    )


EventCallback = Callable[[TokenEvent], object]  # what it returns is ignored


class StreamHandle:
    """The caller's end of one request: its id, its tag and `cancel()`. Events go to `on_event`;
    a request of n samples sends each sample's events (``TokenEvent.index``), n of them final.

    The callback is the one way events leave the worker: it runs on the worker thread, so the
    caller decides how they cross to its own thread (the app appends to an inbox and wakes its
    pane; asyncio code uses `EngineWorker.stream`). Nothing is kept per event.
    """

    def __init__(
        self, worker: EngineWorker, request_id: str, tag: object, on_event: EventCallback, n: int = 1
    ) -> None:
        self.request_id = request_id
        self.tag = tag
        self.n = n
        self._worker = worker
        self._on_event = on_event

    def cancel(self) -> None:
        """Abort the request (every sample) before the worker's next step; each unfinished sample's last
        event has finish_reason "abort"."""
        self._worker.cancel(self.request_id, self.n)

    def _deliver(self, out: RequestOutput) -> None:
        """Called on the worker thread (or on submit's thread for a rejected request)."""
        try:
            self._on_event(_event(out))
        except Exception:
            logger.exception("on_event callback of request %s failed", self.request_id)


class EngineWorker:
    """Runs an Engine on a daemon thread; every public method is thread-safe and non-blocking."""

    def __init__(self, engine: Engine, name: str = "lfm-engine", nice: int = 0) -> None:
        """`nice`: how far below its caller the worker thread's CPU priority runs (Linux, where each
        thread has its own; ignored elsewhere). An interactive caller gives its UI the CPU first."""
        self.engine = engine
        engine.report_progress = True  # a stream says when its request is scheduled, prefills, is preempted
        self._nice = nice
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
        *,
        on_event: EventCallback,
        n: int = 1,
    ) -> StreamHandle:
        """Queue a request (``n`` samples of it: `Engine.add_request`); never blocks, never raises for
        bad input (that becomes an error event for each sample).

        `on_event` runs on the worker thread for every event, each sample's last one `finished`:
        keep it short (append to an inbox, post a message). After shutdown the request is rejected
        at once, with its events on the caller's thread.
        """
        handle = StreamHandle(self, f"stream-{next(self._ids)}", tag, on_event, n)
        if not self._post(lambda: self._start(handle, prompt, params)):
            _reject(handle, RequestError("the engine worker has shut down"))
        return handle

    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        tag: object = None,
        *,
        n: int = 1,
        observe: Observe | None = None,
    ) -> EventStream:
        """`submit` for asyncio code: call on the event loop, iterate the events there. `observe` runs
        on the loop for every event, read or not (a cancelled stream's "abort" events included)."""
        stream = EventStream(n, observe)
        stream.handle = self.submit(prompt, params, tag, on_event=stream.put, n=n)
        return stream

    def cancel(self, request_id: str, n: int = 1) -> None:
        """Abort request ``request_id`` and, for a request of ``n`` samples, its other samples."""
        self._post(lambda: self._abort_samples(request_id, n))

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
        _lower_this_thread(self._nice)
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
            self.engine.add_request(prompt, params, request_id=handle.request_id, tag=handle.tag, n=handle.n)
        except Exception as exc:  # bad input: RequestError, SamplingParamsError, or worse
            _reject(handle, exc)
            return
        for index in range(handle.n):
            self._handles[branch_id(handle.request_id, index)] = handle

    def _abort(self, request_id: str) -> None:
        out = self.engine.abort(request_id)
        if out is not None:
            self._publish([out])

    def _abort_samples(self, request_id: str, n: int) -> None:
        for index in range(n):
            self._abort(branch_id(request_id, index))

    def _publish(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            handle = self._handles.get(out.request_id)
            if handle is None:
                continue
            if out.finished:
                del self._handles[out.request_id]
            handle._deliver(out)


def _lower_this_thread(nice: int) -> None:
    """Raise the calling thread's nice value by `nice` (Linux only; a refusal is not an error)."""
    if nice <= 0 or sys.platform != "linux":
        return
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + nice)
    except OSError:
        logger.info("could not lower the engine thread's priority", exc_info=True)


def _reject(handle: StreamHandle, reason: Exception) -> None:
    """Each sample's final event, refused with ``reason``."""
    now = time.monotonic()
    metrics = RequestMetrics(arrival_time=now, prompt_tokens=0, finished_time=now)
    for index in range(handle.n):
        request_id = branch_id(handle.request_id, index)
        handle._deliver(RequestOutput.rejected(request_id, handle.tag, reason, metrics, index))
