"""Chat templates rendered in worker processes that can be killed: the backstop under the prices.

The prices in model/text/template_limits.py stop the bombs we know of; this stops the ones we do not.
A worker is a plain ``python`` child (started with subprocess, which execs at once: no fork of a
process that runs torch threads, and unlike multiprocessing's spawn it does not re-import the
app's main module, which would import torch) that imports only jinja2 and the template modules.
It caps its own address space, so a render that allocates too much fails there with a
MemoryError, and its CPU time, so it cannot outlive a dead parent by long; the parent waits for
a reply with the GIL released and kills the worker when the render outlives its deadline. One
worker starts in the background when a tokenizer loads (``warm``), more as concurrent renders need
them; they stay warm between renders (a render's overhead is one round trip of pickled plain
data), are replaced after a kill (ours, or anyone's) and end with this process.

The parent trusts nothing the worker says: a reply is a tag byte and UTF-8 text, never a pickle,
and is read no further than the longest output a render may produce.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import pickle
import sys
import threading
from multiprocessing.connection import Pipe
from pathlib import Path
from subprocess import DEVNULL, Popen
from typing import Any

from model.errors import ChatTemplateError, TemplateRefusal
from model.text.template_limits import MAX_TEXT_CHARS

log = logging.getLogger(__name__)

# A worker's address space: jinja2 and Python take ~60 MB of it; a render never needs 100 MB, and
# a machine running a model has 1 GiB to spare for one that tries.
WORKER_MEMORY_LIMIT = 2**30
# Seconds past a render's deadline before the worker is killed: the in-worker deadline answers
# first whenever the template is in a loop or a call; this covers a slow machine's round trip.
KILL_GRACE = 2.0
# Seconds a new worker may take to start (importing jinja2 on a loaded 2-core machine is ~1 s).
START_TIMEOUT = 30.0
# Renders that may run at once, each in its own worker: a bomb occupies one for its deadline
# while the others keep serving; more renders wait for a free worker.
MAX_WORKERS = 4
# CPU seconds a worker may use per render beyond its deadline before the kernel stops it (it
# only matters when the parent died mid-render and cannot kill it).
CPU_MARGIN = 5
_REPLY_LIMIT = 4 * MAX_TEXT_CHARS + 16  # UTF-8 of the longest output, and the tag byte
WARM_TEMPLATES = 8  # compiled templates a worker keeps (a checkpoint has one to a few)
# The protocol with model/text/template_child.py: READY once started, then per render a tag byte
# and UTF-8 text: the output, a failure, or the template's own refusal.
READY = b"ready"
TEXT, FAILURE, REFUSAL = b"t", b"f", b"r"
# The child's entry point, run by `python -I -c` with the package root and the socket's fd
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from model.text.template_child import serve; serve(int(sys.argv[2]))"
)


class WorkerUnavailable(Exception):
    """No worker process can run here: the caller renders in its own process."""


# Out of descriptors, processes or memory for now: this render fails, later ones try again.
_PASSING = (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM)


def _start_error(executable: str, exc: OSError) -> Exception:
    """A passing shortage fails this render only; anything else means no worker can run here."""
    reason = exc.strerror or str(exc)
    if exc.errno in _PASSING:
        return ChatTemplateError(f"cannot start a chat-template worker now ({reason}); try again")
    return WorkerUnavailable(f"cannot start {executable} ({reason})")


class _Worker:
    """One child process and the socket to it."""

    def __init__(self, executable: str) -> None:
        try:
            ours, theirs = Pipe()
        except OSError as exc:
            raise _start_error(executable, exc) from None
        root = str(Path(__file__).resolve().parents[2])  # where the "model" package lives
        command = [executable, "-I", "-c", _BOOT, root, str(theirs.fileno())]
        try:
            self.process = Popen(
                command, stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL, pass_fds=[theirs.fileno()]
            )
        except OSError as exc:
            ours.close()
            raise _start_error(executable, exc) from None
        finally:
            theirs.close()
        self.conn = ours
        if not self.conn.poll(START_TIMEOUT) or self._receive() != READY:
            self.kill()
            raise WorkerUnavailable(f"{executable} started but did not answer within {START_TIMEOUT:g} s")

    def _receive(self) -> bytes:
        try:
            return self.conn.recv_bytes(_REPLY_LIMIT)
        except (EOFError, OSError):
            return b""

    def render(self, source: str, context: dict[str, Any], time_limit: float) -> str:
        """The worker's render; ChatTemplateError (or TemplateRefusal) as the worker reports it."""
        try:
            self.conn.send_bytes(pickle.dumps((source, context, time_limit)))
        except OSError:  # it died since it was last seen alive: no reply, as below
            reply = b""
        else:
            if not self.conn.poll(time_limit + KILL_GRACE):
                self.kill()
                raise ChatTemplateError(f"the chat template took longer than {time_limit:g} s")
            reply = self._receive()
        tag, text = reply[:1], reply[1:].decode("utf-8", "surrogatepass")
        if tag == TEXT:
            return text
        if tag == REFUSAL:
            raise TemplateRefusal(text)
        if tag == FAILURE:
            raise ChatTemplateError(text)
        self.kill()
        raise ChatTemplateError(
            f"the chat template's render process died (memory limit {WORKER_MEMORY_LIMIT >> 20} MiB)"
        )

    def kill(self) -> None:
        self.kill_process()
        self.conn.close()

    def kill_process(self) -> None:
        """End and reap the process; a thread waiting on its socket then reads EOF (no reply)."""
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    @property
    def alive(self) -> bool:
        return not self.conn.closed and self.process.poll() is None


class WorkerPool:
    """Up to ``MAX_WORKERS`` warm workers; unavailable for good once one cannot start (said once).

    Its workers end with this process (atexit), even one in the middle of a render: a child must
    not outlive the app by the rest of its deadline, or its CPU limit when the parent dies.
    """

    def __init__(self, executable: str | None = None) -> None:
        self._executable = executable if executable is not None else sys.executable
        self._idle: list[_Worker] = []
        self._workers: set[_Worker] = set()  # every live one, idle or rendering
        self._warmed = threading.Event()  # clear while a warm-up starts a worker
        self._warmed.set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_WORKERS)
        self._unavailable = "" if os.name == "posix" and self._executable else "no Python executable to start"
        atexit.register(self.close)

    def render(self, source: str, context: dict[str, Any], time_limit: float) -> str:
        """The template's text from a worker; WorkerUnavailable if none can run here."""
        if self._unavailable:
            raise WorkerUnavailable(self._unavailable)
        with self._slots:
            worker = self._take()
            try:
                return worker.render(source, context, time_limit)
            finally:
                with self._lock:
                    if worker.alive:
                        self._idle.append(worker)
                    else:
                        self._workers.discard(worker)

    def warm(self) -> None:
        """Start a worker in a background thread unless one is idle or starting: a worker takes
        ~1 s to start, which the first render would otherwise wait for in full."""
        with self._lock:
            if self._unavailable or self._idle or not self._warmed.is_set():
                return
            if not self._slots.acquire(blocking=False):
                return  # every slot is rendering: their workers will be warm
            self._warmed.clear()
        threading.Thread(target=self._warm_one, name="chat-template-warm-up", daemon=True).start()

    def _warm_one(self) -> None:
        try:
            # said in the log, and renders fall back; a passing shortage is retried by the next render
            with contextlib.suppress(WorkerUnavailable, ChatTemplateError):
                worker = self._start()
                with self._lock:
                    self._idle.append(worker)
        finally:
            self._slots.release()
            self._warmed.set()

    def _take(self) -> _Worker:
        self._warmed.wait(START_TIMEOUT)  # a worker already starting is ready sooner than a new one
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
                self._workers.discard(worker)  # ended while idle (killed from outside)
        if self._unavailable:  # the warm-up found that no worker can start
            raise WorkerUnavailable(self._unavailable)
        return self._start()

    def _start(self) -> _Worker:
        try:
            worker = _Worker(self._executable)
        except WorkerUnavailable as exc:
            if not self._unavailable:
                self._unavailable = str(exc)
                log.warning("chat templates render in this process, bounded but not isolated: %s", exc)
            raise
        with self._lock:
            self._workers.add(worker)
        return worker

    def pids(self) -> list[int]:
        """The process ids of the live workers, idle or rendering: what an operator (or a test) looks for."""
        with self._lock:
            return sorted(worker.process.pid for worker in self._workers if worker.alive)

    def close(self) -> None:
        """End every worker; a render in progress fails as if its worker had died."""
        with self._lock:
            idle, busy = self._idle, self._workers.difference(self._idle)
            self._idle, self._workers = [], set()
        for worker in idle:
            worker.kill()
        for worker in busy:
            worker.kill_process()  # its socket is the rendering thread's to close


POOL = WorkerPool()


def render(source: str, context: dict[str, Any], time_limit: float) -> str:
    """``source`` rendered with ``context`` in a worker of the process's pool."""
    return POOL.render(source, context, time_limit)


def warm() -> None:
    """Have a worker of the process's pool ready before the first render (see WorkerPool.warm)."""
    POOL.warm()
