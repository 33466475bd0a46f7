"""A server started for a benchmark, a screenshot or a test: a free local port, /health awaited.

llama-server, `lfm-chat serve` and `transformers serve` are each started the same way, so this is
where it is written once: pick a port, start the command with it, poll GET /health until it
answers 200, and stop the process afterwards.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

POLL_SECONDS = 0.3


class ServerDidNotStart(RuntimeError):
    """The command exited, or /health did not answer within the limit; the message says which."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served(command: Callable[[int], list[str]], what: str, limit: float, **popen: Any) -> Iterator[str]:
    """Start ``command(port)`` (``popen``: Popen's keywords); yield its URL once /health answers."""
    with served_process(command, what, limit, **popen) as (url, _):
        yield url


@contextlib.contextmanager
def served_process(
    command: Callable[[int], list[str]], what: str, limit: float, **popen: Any
) -> Iterator[tuple[str, subprocess.Popen[Any]]]:
    """As `served`, and the process too, for a caller that pauses it between rounds."""
    port = free_port()
    process = subprocess.Popen(command(port), **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url, what, limit)
        yield url, process
    finally:
        process.terminate()
        process.wait(30)


def wait_until_healthy(process: subprocess.Popen[Any], url: str, what: str, limit: float) -> None:
    """Poll ``url``/health until it answers 200. Raises ServerDidNotStart when the process exits
    (with the end of its stderr, when that was piped) or the limit passes."""
    deadline = time.monotonic() + limit
    while not _healthy(url):
        if process.poll() is not None:
            said = process.stderr.read() if process.stderr else ""
            said = said.decode(errors="replace") if isinstance(said, bytes) else said
            raise ServerDidNotStart(f"{what} exited with code {process.returncode}. {said[-2000:]}".strip())
        if time.monotonic() > deadline:
            raise ServerDidNotStart(f"{what} did not answer /health within {limit:.0f} s")
        time.sleep(POLL_SECONDS)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
