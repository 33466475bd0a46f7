"""The HTTP connections `serve` accepts: a cap on how many are open, deadlines for a request's headers,
its body and a reply the client does not read, and an access log without the health and metrics polls.

uvicorn's h11 protocol holds a connection that sends half a request line for ever (its one timer,
keep-alive, is armed only after a response), and accepts connections until the process runs out of
file descriptors, when asyncio logs "Too many open files" with a traceback for every accept. nginx
answers this with worker_connections, client_header_timeout and client_body_timeout; GuardedH11
is those three, as a subclass of uvicorn's H11Protocol passed through uvicorn's documented `http=`
hook: the deadlines must be armed at moments only the protocol sees (connection made, first byte
of a request, headers complete, body complete), and a cap enforced in connection_made turns a
connection away before any work is done for it. A middleware could do neither: it runs only once
the headers are complete.

Every state has a deadline. A reply's bytes wait in a send buffer bounded at SEND_BUFFER_BYTES (the
socket's and asyncio's each); once both are full the reply has `send_timeout` to move, then the
connection is cut. uvicorn reads no further request of a pipelining client while one is being
answered, so what such a client can make the server hold is one read and one bounded reply.

At the cap a new connection displaces one that holds a slot without being served, oldest first in
this order (DISPLACEABLE): idle between requests or still sending its headers (nginx frees idle
keep-alive connections the same way), a reply stalled on a client that does not read, a body still
arriving. So no flood of half-sent requests, unread replies or slow bodies locks out a client that
sends its request at once; only when every connection is being served is the newcomer turned away,
with a 503 and Retry-After that it can read (see GuardedH11._refuse).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE, H11Protocol

from server.errors import error_body
from server.limits import FD_RESERVE, LINGER_S, SEND_BUFFER_BYTES, ConnectionLimits, connection_cap

logger = logging.getLogger(__name__)

WARN_EVERY_S = 60.0  # the connection-cap and out-of-descriptors warnings, at most this often


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


class BoundedHeads(h11.Connection):
    """h11's connection, but a request whose head (request line and headers) is over the limit is a
    protocol error with status 431, even when the whole head arrived in one read: h11 bounds only
    what it buffers while a head is incomplete. The last error is kept, so that GuardedH11 can answer
    with its status."""

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes
        self.error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
            if isinstance(event, h11.Request) and _head_bytes(event) > self.max_head_bytes:
                raise h11.RemoteProtocolError("request headers over the limit", error_status_hint=431)
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise
        return event


def _head_bytes(request: h11.Request) -> int:
    """The size of a request's head as sent, give or take the spaces around header values."""
    line = len(request.method) + len(request.target) + len(b"  HTTP/1.1\r\n")
    return line + sum(len(name) + len(value) + 4 for name, value in request.headers.raw_items()) + 2


# Who is closed first at the cap, each kind oldest first: a keep-alive between requests or one still
# sending its headers, then a reply stalled on a client that does not read, then a body still arriving.
DISPLACEABLE = ("idle", "stalled", "body")
MAX_LINGERING = FD_RESERVE // 4  # refused newcomers whose 503 is still being read; more linger briefly
BRIEF_LINGER_S = 0.2  # a refused newcomer past MAX_LINGERING whose request does not come at once


class Gate:
    """The connections one server holds, and which of them may be displaced (see DISPLACEABLE); a
    connection serving a request whose reply flows is never displaced."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[GuardedH11] = set()
        self.ranks: dict[str, dict[GuardedH11, None]] = {kind: {} for kind in DISPLACEABLE}
        self.lingering = 0
        self._warned = -WARN_EVERY_S

    def admit(self, connection: GuardedH11) -> bool:
        """Make room for `connection`, displacing the one that holds the most for the longest at the
        cap; False if every open connection is being served."""
        if len(self.open) >= self.limit:
            victim = next((c for kind in DISPLACEABLE for c in self.ranks[kind]), None)
            if victim is None:
                return False
            self._warn()
            victim.drop()
        self.open.add(connection)
        self.mark(connection, "idle")
        return True

    def mark(self, connection: GuardedH11, kind: str | None) -> None:
        """`connection` is now of `kind` (None: being served). It keeps its age within a kind it
        already had, so dripping bytes does not make it younger."""
        for other, members in self.ranks.items():
            if other != kind:
                members.pop(connection, None)
        if kind is not None and connection in self.open:
            self.ranks[kind].setdefault(connection, None)

    def leave(self, connection: GuardedH11) -> None:
        self.open.discard(connection)
        self.mark(connection, None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_S:
            self._warned = now
            message = "%d connections are open (--max-connections): closing the oldest idle or stalled ones"
            logger.warning(message, self.limit)


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under a Gate, the header and body deadlines, and a bounded,
    deadlined send buffer (see the module)."""

    gate: Gate
    limits: ConnectionLimits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        self.heads = BoundedHeads(limit)
        self.conn = self.heads
        self.admitted = False
        self.deadline: asyncio.TimerHandle | None = None
        self.deadline_kind = "header"
        self.stall: asyncio.TimerHandle | None = None  # armed while the client reads none of the reply
        self.lingering = False  # refused, its 503 left to be read

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.gate.admit(self):
            self._refuse(transport)
            return
        self.admitted = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        transport.set_write_buffer_limits(high=SEND_BUFFER_BYTES)
        super().connection_made(transport)
        self._arm(self.limits.header_timeout)

    def _refuse(self, transport: asyncio.Transport) -> None:
        """503, then half-close and discard what the client sends for LINGER_S: closing a socket with
        unread bytes in it sends a reset, which would destroy the 503 before the client reads it.
        Past MAX_LINGERING refusals at once (a burst), a refused socket closes as soon as its
        request's first bytes have been read, which in a burst of small requests is all of them."""
        self.transport = transport
        transport.write(TOO_MANY)
        transport.write_eof()
        if self.gate.lingering >= MAX_LINGERING:
            self.loop.call_later(BRIEF_LINGER_S, transport.close)
            return
        self.gate.lingering += 1
        self.lingering = True
        self.loop.call_later(LINGER_S, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.admitted:
            if self.lingering:
                self.gate.lingering -= 1
            return
        self._disarm()
        self._unstall()
        self.gate.leave(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:  # a refused newcomer's request: discarded
            if not self.lingering:  # a burst's: read, so closing now sends no reset
                self.transport.close()
            return
        if self.deadline is None and self.conn.their_state is h11.IDLE:  # a new request's first bytes
            self._arm(self.limits.header_timeout)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()  # idle until the next request, or a pipelined request was read meanwhile

    def pause_writing(self) -> None:
        """The send buffers are full: the client has SEND_TIMEOUT to read some of the reply."""
        super().pause_writing()
        if self.stall is None:
            self.stall = self.loop.call_later(self.limits.send_timeout, self.transport.abort)
        self._follow()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unstall()
        self._follow()

    def drop(self) -> None:
        """Close at once, making room for a newcomer."""
        self.gate.leave(self)
        self._disarm()
        self._unstall()
        self.transport.abort()

    def send_400_response(self, msg: str) -> None:
        """A malformed request: 431 for headers over the limit, else 400, in OpenAI's JSON shape with
        h11's reason (uvicorn's own answer is plain text with a fixed sentence)."""
        error = self.heads.error
        if error is not None and error.error_status_hint == 431:
            limit = self.heads.max_head_bytes
            response = _raw_response(
                431, "Request Header Fields Too Large", f"the request's headers are over {limit} bytes"
            )
        else:
            detail = str(error) if error is not None and str(error) else "not valid HTTP/1.1"
            response = _raw_response(400, "Bad Request", f"malformed HTTP request: {detail}")
        self.transport.write(response)
        self.transport.close()

    def _follow(self) -> None:
        """Move the deadline along with the request (headers -> body -> none) and tell the Gate how
        displaceable the connection now is."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self.deadline is not None and self.deadline_kind == "header":
                self._arm(self.limits.body_timeout, "body")
        elif state is not h11.IDLE:
            self._disarm()
        if self.stall is not None:
            self.gate.mark(self, "stalled")
        else:
            self.gate.mark(self, "idle" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

    def _unstall(self) -> None:
        if self.stall is not None:
            self.stall.cancel()
            self.stall = None

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
