"""An ASGI app served over real HTTP on an ephemeral port, in a thread of the test process.

Tests read the engine's own figures in-process, but everything they check goes over HTTP, as a
client would see it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from server.guarded_server import make_server
from server.limits import ConnectionLimits
from tests.waiting import wait_for


@contextlib.contextmanager
def serving(app: Any, limits: ConnectionLimits | None = None) -> Iterator[str]:
    """Serve `app` as `lfm-chat serve` does (its connection limits) on 127.0.0.1 and a free port;
    yield its base URL; stop it on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    limits = limits or ConnectionLimits()
    server = make_server(app, limits, log_level="warning", timeout_graceful_shutdown=2)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), "the server to start")
    assert server.started, "the server's thread ended before it started serving"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
