"""Hostile HTTP clients against a real `lfm-chat serve` process: half-sent requests, a flood of
connections past the process's descriptor limit, and a log that stays readable meanwhile.

The server runs as a subprocess (its descriptor limit lowered to FD_LIMIT, its stderr and stdout in a
file) so the flood reaches its limit, not the test's. Loopback only; every socket is closed on exit.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.test_cli import ROOT, free_port
from tests.waiting import HANG_GUARD

FD_LIMIT = 300  # the server's RLIMIT_NOFILE: a cap of FD_LIMIT - FD_RESERVE connections
HEADER_TIMEOUT = 2
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Served:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def _lower_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@contextlib.contextmanager
def serving(checkpoint: Path, log: Path, flags: list[str]) -> Iterator[Served]:
    """`lfm-chat serve` on `checkpoint` with `flags`, under the FD_LIMIT descriptor limit, until exit."""
    port = free_port()
    argv = ["--model", str(checkpoint), "--dtype", "float32", "--port", str(port), *flags]
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", *argv],
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_lower_fd_limit,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "lfm-chat serve did not come up"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            time.sleep(0.2)
        yield Served(url, log)
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def served(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    flags = ["--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(HEADER_TIMEOUT)]
    flags += ["--max-connections", "100000"]
    with serving(tiny_ckpt, tmp_path_factory.mktemp("serve-log") / "serve.log", flags) as served:
        yield served


@pytest.fixture(scope="module", autouse=True)
def enough_descriptors_here() -> None:
    """This process opens ~1,000 sockets at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (hard if hard == resource.RLIM_INFINITY else min(4096, hard), hard)
        )


@contextlib.contextmanager
def connections(port: int, count: int, first_bytes: bytes) -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if first_bytes:
                sock.sendall(first_bytes)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def closed_by_server(sockets: list[socket.socket], within: float) -> int:
    """How many of `sockets` the server closes (EOF or reset) within `within` seconds; returns as soon
    as it has closed them all."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    closed, deadline = 0, time.monotonic() + within
    while closed < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                selector.unregister(sock)
                closed += 1
    selector.close()
    return closed


def assert_serving(url: str) -> None:
    """A client that sends its request at once is answered (without the limits it hangs)."""
    assert httpx.get(f"{url}/health", timeout=HANG_GUARD).status_code == 200
    reply = httpx.post(f"{url}/v1/chat/completions", json=HELLO, timeout=HANG_GUARD)
    assert reply.status_code == 200, reply.text


def assert_quiet(lines: list[str]) -> None:
    """No traceback, not asyncio's line per failed accept; a few one-line warnings at most."""
    text = "\n".join(lines)
    assert "Traceback" not in text and "socket.accept() out of system resource" not in text, text
    assert len(lines) < 10, text


def test_half_sent_requests_are_closed_and_do_not_lock_out_a_client(served: Served) -> None:
    before = len(served.log_lines())
    with connections(served.port(), 1000, b"GET /health HTTP/1.1\r\nHost: slow") as held:
        assert_serving(served.url)
        assert closed_by_server(held, within=HANG_GUARD) == len(held)
    assert_quiet([line for line in served.log_lines()[before:] if "POST /v1/chat" not in line])


def test_a_flood_past_the_descriptor_limit_leaves_the_server_answering_and_the_log_quiet(
    served: Served,
) -> None:
    before = len(served.log_lines())
    with connections(served.port(), 2 * FD_LIMIT, b""):
        assert_serving(served.url)
        assert_serving(served.url)
    assert_quiet([line for line in served.log_lines()[before:] if "POST /v1/chat" not in line])


def test_health_and_metrics_polls_stay_out_of_the_access_log(served: Served) -> None:
    before = len(served.log_lines())
    for _ in range(10):
        assert httpx.get(f"{served.url}/metrics").status_code == 200
        assert httpx.get(f"{served.url}/health").status_code == 200
    assert httpx.post(f"{served.url}/v1/chat/completions", json=HELLO, timeout=15).status_code == 200
    assert httpx.get(f"{served.url}/no-such-page").status_code == 404
    new = served.log_lines()[before:]
    assert not [line for line in new if "/metrics" in line or "/health" in line], new
    assert any('"POST /v1/chat/completions HTTP/1.1" 200' in line for line in new), new
    assert any('"GET /no-such-page HTTP/1.1" 404' in line for line in new), new


def test_a_client_that_hangs_up_mid_upload_leaves_no_traceback(served: Served) -> None:
    before = len(served.log_lines())
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    with connections(served.port(), 1, head + b"Content-Length: 100000\r\n\r\n" + b'{"messages": '):
        time.sleep(0.5)  # the app is reading the body
    assert_serving(served.url)
    new = served.log_lines()[before:]
    assert not [line for line in new if "Traceback" in line or " 500" in line or "failed" in line], new


def test_a_body_sent_too_slowly_is_cut_off(served: Served) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"
    with connections(served.port(), 20, head) as held:
        assert_serving(served.url)
        assert closed_by_server(held, within=HANG_GUARD) == len(held)


def test_oversized_headers_are_refused_and_logged_at_most_once(served: Served) -> None:
    before = len(served.log_lines())
    for _ in range(30):  # the server answers 431 and closes while the headers still arrive: often a reset
        with contextlib.suppress(httpx.TransportError):
            assert httpx.get(f"{served.url}/health", headers={"X-Big": "a" * 2_000_000}).status_code == 431
    assert_serving(served.url)
    assert_quiet([line for line in served.log_lines()[before:] if "POST /v1/chat" not in line])
    assert len(served.log_lines()[before:]) <= 4
