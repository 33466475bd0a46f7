"""Real MCP servers (tests/app/tools/servers.py, written with the SDK's server API) behind a ToolBox."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.config import HttpServer, StdioServer
from app.tools.toolbox import ToolBox
from tests.waiting import wait_for

SERVERS = Path(__file__).with_name("servers.py")


def stdio_server(name: str, kind: str) -> StdioServer:
    return StdioServer(name, sys.executable, (str(SERVERS), kind))


@pytest.fixture(scope="module")
def toolbox() -> Iterator[ToolBox]:
    """calc and hostile over stdio, started on the first test's first use."""
    box = ToolBox([stdio_server("calc", "calc"), stdio_server("hostile", "hostile")])
    yield box
    box.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def http_calc() -> Iterator[HttpServer]:
    """The calc server over streamable HTTP, in a process of its own."""
    port = free_port()
    server = subprocess.Popen([sys.executable, str(SERVERS), "calc", "http", str(port)])
    try:
        wait_for(lambda: answers(port) or server.poll() is not None, "the HTTP MCP server to listen")
        assert server.poll() is None, "the HTTP MCP server exited"
        yield HttpServer("remote", f"http://127.0.0.1:{port}/mcp")
    finally:
        server.kill()
        server.wait()
