"""The connection cap against clients that hold a slot without being served: pipelined requests whose
replies they never read, a streamed reply they stall, bodies they send too slowly. Each fills the cap
of a real `lfm-chat serve` whose deadlines are far off, so only the cap's policy (close the connection
that holds the most for the longest) can let an authenticated chat and `/health` through.

And, on an in-process server whose app holds every request: a newcomer at a full cap reads a 503 with
Retry-After (not a reset), and a reply nobody reads is cut after the send timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.guarded_server import make_server
from server.limits import ConnectionLimits
from tests.server.test_cli import free_port
from tests.server.test_connections import Served, connections, serving
from tests.waiting import HANG_GUARD, wait_for

CAP = 6
KEY = "sesame"
AUTH = {"Authorization": f"Bearer {KEY}"}
FAR = "3600"  # seconds: no deadline expires during a test
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
SMALL_WINDOW = 4096  # a non-reading client's receive buffer, so the server's side fills quickly


@pytest.fixture(scope="module")
def served(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    flags = ["--api-key", KEY, "--max-connections", str(CAP)]
    flags += ["--header-timeout", FAR, "--body-timeout", FAR, "--send-timeout", FAR]
    with serving(tiny_ckpt, tmp_path_factory.mktemp("cap-log") / "serve.log", flags) as served:
        yield served


@contextlib.contextmanager
def non_readers(port: int, count: int, request: bytes) -> Iterator[list[socket.socket]]:
    """`count` connections that each send `request` and never read a byte."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_WINDOW)
            sock.settimeout(5)
            sock.connect(("127.0.0.1", port))
            sock.sendall(request)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def health_answers(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(f"{url}/health", timeout=HANG_GUARD).status_code == 200
    return False


def assert_serving(url: str) -> None:
    """`/health` is answered once the held connections have settled, then an authenticated chat."""
    wait_for(lambda: health_answers(url), "/health to be answered at the full cap")
    reply = httpx.post(f"{url}/v1/chat/completions", json=HELLO, headers=AUTH, timeout=HANG_GUARD)
    assert reply.status_code == 200, reply.text
    assert health_answers(url)


def test_non_reading_pipelined_clients_do_not_lock_out_the_others(served: Served) -> None:
    pipelined = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
    with non_readers(served.port(), CAP, pipelined):
        assert_serving(served.url)


def test_stalled_streamed_replies_do_not_lock_out_the_others(served: Served) -> None:
    """Each reply (~300 KB with its top logprobs) stalls once the send buffers are full; a client
    pipelines several so that no buffer the kernel may grow to (4 MiB) holds them all."""
    body = httpx.Request(
        "POST",
        "http://x/v1/chat/completions",
        json={**HELLO, "max_tokens": 2000, "stream": True, "logprobs": True, "top_logprobs": 20},
    ).content
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with non_readers(served.port(), CAP, (head.encode() + body) * 16):
        assert_serving(served.url)


def test_slow_bodies_do_not_lock_out_the_others(served: Served) -> None:
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    head += "Content-Length: 1000\r\n\r\n{"
    with connections(served.port(), CAP, head.encode()):
        assert_serving(served.url)


class Held:
    """An ASGI app that answers nothing until released, or a 1 MiB body to /big."""

    def __init__(self) -> None:
        self.release: asyncio.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiting = 0

    def let_go(self) -> None:
        """Answer the held requests (from the test's thread), so that the server can shut down."""
        if self.loop is not None and self.release is not None:
            self.loop.call_soon_threadsafe(self.release.set)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/big":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"x" * 2**20})
            return
        self.release = self.release or asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.waiting += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@contextlib.contextmanager
def in_process(app: Held, limits: ConnectionLimits) -> Iterator[tuple[int, Any]]:
    port = free_port()
    server = make_server(app, limits, host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the in-process server to start")
    try:
        yield port, server
    finally:
        server.should_exit = True
        thread.join(HANG_GUARD)


def test_a_newcomer_at_a_full_cap_reads_a_503_with_retry_after() -> None:
    app = Held()
    with in_process(app, ConnectionLimits(max_connections=2)) as (port, _):
        request = b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n"
        with connections(port, 2, request):
            wait_for(lambda: app.waiting == 2, "both requests to reach the app")
            for _ in range(20):  # each refusal must be readable, not a reset
                with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as newcomer:
                    newcomer.sendall(request)
                    answer = b""
                    while chunk := newcomer.recv(65536):
                        answer += chunk
                head = answer.split(b"\r\n\r\n", 1)[0].lower()
                assert head.startswith(b"http/1.1 503") and b"retry-after: 1" in head, answer
        app.let_go()


def test_a_burst_of_newcomers_at_a_full_cap_all_read_the_503() -> None:
    """200 at once, far past the refused sockets left to linger (MAX_LINGERING): each still reads its
    503, none a reset."""
    app = Held()
    outcomes: list[bytes | str] = []
    with in_process(app, ConnectionLimits(max_connections=2)) as (port, _):
        request = b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n"
        with connections(port, 2, request):
            wait_for(lambda: app.waiting == 2, "both requests to reach the app")
            start = threading.Event()

            def newcomer() -> None:
                start.wait()
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as sock:
                        sock.sendall(request)
                        answer = b""
                        while chunk := sock.recv(65536):
                            answer += chunk
                    outcomes.append(answer.split(b"\r\n", 1)[0])
                except OSError as exc:
                    outcomes.append(type(exc).__name__)

            burst = [threading.Thread(target=newcomer) for _ in range(200)]
            for thread in burst:
                thread.start()
            start.set()
            for thread in burst:
                thread.join(HANG_GUARD)
        app.let_go()
    assert outcomes == [b"HTTP/1.1 503 Service Unavailable"] * 200


def test_a_reply_nobody_reads_is_cut_after_the_send_timeout() -> None:
    with in_process(Held(), ConnectionLimits(send_timeout=1)) as (port, server):
        gate = server.config.http_protocol_class.gate
        with non_readers(port, 1, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"):
            wait_for(lambda: gate.open, "the connection to be admitted")
            wait_for(lambda: not gate.open, "the stalled reply's connection to be closed")


def read_all(port: int, request: bytes) -> tuple[bytes, dict[str, Any]]:
    """Send `request` in one write; the status line and JSON body of the answer, read to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), answer
    return head.split(b"\r\n", 1)[0], json.loads(body)


def test_headers_over_the_limit_in_one_write_are_431_and_malformed_requests_400_in_json() -> None:
    app = Held()
    with in_process(app, ConnectionLimits()) as (port, _):
        big = b"GET /held HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100_000 + b"\r\n\r\n"
        status, body = read_all(port, big)
        assert status.startswith(b"HTTP/1.1 431"), status
        assert "16384 bytes" in body["error"]["message"]
        many = b"GET /held HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: aaaaaaaa\r\n" * 2_000 + b"\r\n"
        assert read_all(port, many)[0].startswith(b"HTTP/1.1 431")
        status, body = read_all(port, b"GET /held HTTP/1.1\r\nHost x\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 400"), status
        assert body["error"]["type"] == "invalid_request_error"
        assert app.waiting == 0, "a refused request reached the app"
