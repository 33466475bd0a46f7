"""The HTTP connections `serve` accepts: a cap on how many are open, deadlines for a request's headers
and body, and an access log without the health and metrics polls.

uvicorn's h11 protocol holds a connection that sends half a request line for ever (its one timer,
keep-alive, is armed only after a response), and accepts connections until the process runs out of
file descriptors, when asyncio logs "Too many open files" with a traceback for every accept. nginx
answers this with worker_connections, client_header_timeout and client_body_timeout; GuardedH11
is those three, as a subclass of uvicorn's H11Protocol passed through uvicorn's documented `http=`
hook: the deadlines must be armed at moments only the protocol sees (connection made, first byte
of a request, headers complete, body complete), and a cap enforced in connection_made turns a
connection away before any work is done for it. A middleware could do neither: it runs only once
the headers are complete.

At the cap a new connection displaces the oldest one that is still sending its headers, or idle
between requests (nginx frees idle keep-alive connections the same way), so a flood of half-sent
requests cannot lock out a client that sends its request at once; only when every connection has
a request in progress is the newcomer turned away, with a 503.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from server.errors import error_body
from server.limits import FD_RESERVE, ConnectionLimits, connection_cap

logger = logging.getLogger(__name__)

QUIET_PATHS = ("/health", "/metrics")  # polled several times a second by the TUI and by scrapers
WARN_EVERY_S = 60.0  # the connection-cap and out-of-descriptors warnings, at most this often
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # asyncio's accept retries


def _raw_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for the moments h11 cannot send one
    (no request was read yet)."""
    body = json.dumps(error_body(status, message)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n"
    )
    retry = "retry-after: 1\r\n" if status == 503 else ""
    return (head + retry + "\r\n").encode() + body


TOO_MANY = _raw_response(
    503, "Service Unavailable", "the server has too many open connections; retry shortly"
)


class Gate:
    """The connections one server holds, and which of them may be displaced (insertion order: oldest
    first): those with no request in progress."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[GuardedH11] = set()
        self.idle: dict[GuardedH11, None] = {}
        self._warned = -WARN_EVERY_S

    def admit(self, connection: GuardedH11) -> bool:
        """Make room for `connection`, displacing the oldest idle one at the cap; False if none is idle."""
        if len(self.open) >= self.limit:
            oldest = next(iter(self.idle), None)
            if oldest is None:
                return False
            self._warn()
            oldest.drop()
        self.open.add(connection)
        self.idle[connection] = None
        return True

    def busy(self, connection: GuardedH11) -> None:
        self.idle.pop(connection, None)

    def rest(self, connection: GuardedH11) -> None:
        if connection in self.open:
            self.idle.pop(connection, None)
            self.idle[connection] = None  # now the youngest

    def leave(self, connection: GuardedH11) -> None:
        self.open.discard(connection)
        self.idle.pop(connection, None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_S:
            self._warned = now
            message = "%d connections are open (--max-connections): closing the oldest idle ones"
            logger.warning(message, self.limit)


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under a Gate and the header and body deadlines (see the module)."""

    gate: Gate
    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.admitted = False
        self.deadline: asyncio.TimerHandle | None = None
        self.deadline_kind = "header"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.gate.admit(self):
            transport.write(TOO_MANY)
            transport.close()
            return
        self.admitted = True
        super().connection_made(transport)
        self._arm(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            return
        self._disarm()
        self.gate.leave(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.deadline is None and self.conn.their_state is h11.IDLE:  # a new request's first bytes
            self._arm(self.limits.header_timeout)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:  # idle until the next request: displaceable again
            self.gate.rest(self)
        self._follow()  # a pipelined request may have been read meanwhile

    def drop(self) -> None:
        """Close at once, making room for a newcomer."""
        self.gate.leave(self)
        self._disarm()
        self.transport.abort()

    def _follow(self) -> None:
        """Move the deadline along with the request: headers -> body -> none. Still sending headers,
        a connection keeps its place among the idle ones (dripping bytes does not make it younger)."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self.gate.busy(self)
            if self.deadline is not None and self.deadline_kind == "header":
                self._arm(self.limits.body_timeout, "body")
        elif state is not h11.IDLE:
            self.gate.busy(self)
            self._disarm()

    def _arm(self, seconds: float, kind: str = "header") -> None:
        self._disarm()
        self.deadline_kind = kind
        self.deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expire(self) -> None:
        """408 and close, as nginx does; past the headers only if the app has not begun to answer."""
        self.deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
            part = "headers" if self.deadline_kind == "header" else "body"
            seconds = self.limits.header_timeout if part == "headers" else self.limits.body_timeout
            message = f"the request's {part} took longer than {seconds:g} s to arrive"
            self.transport.write(_raw_response(408, "Request Timeout", message))
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11]:
    """A GuardedH11 class with its own Gate: one per server, as uvicorn makes one protocol per connection."""
    cap = connection_cap(limits.max_connections)
    return type("GuardedH11", (GuardedH11,), {"gate": Gate(cap), "limits": limits})


class QuietPolls(logging.Filter):
    """Drops successful GET /health and /metrics lines from uvicorn's access log; other lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:  # client, method, path, HTTP version, status
            _, method, path, _, status = args
            return not (method == "GET" and path in QUIET_PATHS and isinstance(status, int) and status < 400)
        return True


class GuardedServer(uvicorn.Server):
    """uvicorn's Server whose event loop reports running out of descriptors in one line a minute.

    asyncio accepts up to `backlog` connections per wake-up before any of them reaches the Gate, so a
    burst can still exhaust the descriptors; asyncio then stops accepting for a second (the right
    back-pressure) but logs a traceback for every failed accept, hence this handler."""

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        warned = [-WARN_EVERY_S]

        def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            error = context.get("exception")
            if not (isinstance(error, OSError) and error.errno in OUT_OF_DESCRIPTORS):
                loop.default_exception_handler(context)
            elif time.monotonic() - warned[0] >= WARN_EVERY_S:
                warned[0] = time.monotonic()
                logger.warning("out of file descriptors (%s): pausing new connections for a second", error)

        loop.set_exception_handler(handle)
        await super().serve(sockets)


class OncePerMinute(logging.Filter):
    """Lets uvicorn's per-request "Invalid HTTP request received." through once a minute: the client
    got its 400, and a stream of garbage must not bury the log."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -WARN_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Invalid HTTP request received.":
            return True
        now = time.monotonic()
        if now - self.last < WARN_EVERY_S:
            return False
        self.last = now
        return True


def _add_filter(name: str, kind: type[logging.Filter]) -> None:
    logger = logging.getLogger(name)  # configured by uvicorn's Config(): add the filter after it
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())


def make_server(app: Any, limits: ConnectionLimits, **options: Any) -> GuardedServer:
    """A server for `app` with the guarded protocol; `options` are uvicorn's Config's (host, port...)."""
    protocol = guarded_protocol(limits)
    # The listen backlog is also how many connections asyncio accepts per wake-up: keep one burst
    # within the descriptors left beside the cap.
    backlog = min(2048, max(16, FD_RESERVE // 2))
    config = uvicorn.Config(app, http=protocol, backlog=backlog, **options)
    _add_filter("uvicorn.access", QuietPolls)
    _add_filter("uvicorn.error", OncePerMinute)
    return GuardedServer(config)
