"""The uvicorn server `serve` runs: the guarded protocol of server/connections.py, a drain before
shutdown, and a log that neither repeats the TUI's polls nor buries itself under a flood.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

import uvicorn

from server.connections import WARN_EVERY_S, guarded_protocol
from server.limits import FD_RESERVE, ConnectionLimits

logger = logging.getLogger(__name__)

QUIET_PATHS = ("/health", "/metrics")  # polled several times a second by the TUI and by scrapers
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # asyncio's accept retries


class QuietPolls(logging.Filter):
    """Drops successful GET /health and /metrics lines from uvicorn's access log; other lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:  # client, method, path, HTTP version, status
            _, method, path, _, status = args
            return not (method == "GET" and path in QUIET_PATHS and isinstance(status, int) and status < 400)
        return True


class GuardedServer(uvicorn.Server):
    """uvicorn's Server whose event loop reports running out of descriptors in one line a minute, and
    which drains before it shuts down.

    asyncio accepts up to `backlog` connections per wake-up before any of them reaches the Gate, so a
    burst can still exhaust the descriptors; asyncio then stops accepting for a second (the right
    back-pressure) but logs a traceback for every failed accept, hence this handler.

    On SIGTERM uvicorn stops accepting, closes idle connections and waits `timeout_graceful_shutdown`
    for the others, then cancels their handlers: a streamed reply stops with no final event, a
    collected one gets uvicorn's plain-text 500, and each logs a traceback. Here requests in flight
    first get `drain_timeout` to finish; then `on_drain_timeout` ends them through the engine (the app
    aborts them), so that each handler ends its reply as for any aborted request, within uvicorn's
    graceful timeout."""

    def __init__(
        self, config: uvicorn.Config, drain_timeout: float, on_drain_timeout: Callable[[], None] | None
    ) -> None:
        super().__init__(config)
        self.drain_timeout = drain_timeout
        self.on_drain_timeout = on_drain_timeout

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_drain_timeout is None:  # nothing could end the requests: uvicorn's shutdown alone
            await super().shutdown(sockets)
            return
        for server in self.servers:
            server.close()  # no new connections; uvicorn's shutdown closes them again, harmlessly
        for connection in list(self.server_state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their reply
        if not await self._drained(self.drain_timeout):
            logger.warning(
                "%d requests still running %g s after the signal (--drain-timeout): ending them",
                len(self.server_state.tasks),
                self.drain_timeout,
            )
            self.on_drain_timeout()
        await super().shutdown(sockets)

    async def _drained(self, seconds: float) -> bool:
        """Whether every connection closed within `seconds` (or a second Ctrl-C forced the exit)."""
        give_up = time.monotonic() + seconds
        while self.server_state.connections and not self.force_exit:
            if time.monotonic() >= give_up:
                return False
            await asyncio.sleep(0.1)
        return True

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


def make_server(
    app: Any, limits: ConnectionLimits, on_drain_timeout: Callable[[], None] | None = None, **options: Any
) -> GuardedServer:
    """A server for `app` with the guarded protocol; `on_drain_timeout` ends the requests still in
    flight `limits.drain_timeout` after a shutdown began; `options` are uvicorn's Config's (host, port...)."""
    protocol = guarded_protocol(limits)
    # The listen backlog is also how many connections asyncio accepts per wake-up: keep one burst
    # within the descriptors left beside the cap.
    backlog = min(2048, max(16, FD_RESERVE // 2))
    config = uvicorn.Config(app, http=protocol, backlog=backlog, **options)
    _add_filter("uvicorn.access", QuietPolls)
    _add_filter("uvicorn.error", OncePerMinute)
    return GuardedServer(config, limits.drain_timeout, on_drain_timeout)
