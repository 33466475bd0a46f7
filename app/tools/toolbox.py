"""The ToolBox: every configured MCP server, for all panes and for `lfm-chat -p`.

It owns the servers and runs them on an event loop of its own, in a thread of its own, so it is
the same to a Textual app, a plain thread or `asyncio.run`: its async methods may be awaited from
any loop, several at once, and cancelling the awaiting task (Esc) cancels the call. Servers start
on first use; nothing here raises for a server's or a tool's failure: a call that fails is a
ToolResult with is_error, one sentence saying why.

A tool's name is what a model calls it by: cleaned, and unique across all servers. Of servers that
start together, the one first in mcp.json keeps a name they share, the others' tools are offered as
"server_name"; a name once given stays (a conversation's calls keep working), so a server started
later that lists a taken name gets the prefix.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.tools import cleaning
from app.tools.config import ServerConfig
from app.tools.connection import CallFailed, Connection, ListedTool, State

T = TypeVar("T")
START_TIMEOUT = 30.0  # seconds for a server to start and list its tools

# The SDK logs a server's bad lines and closed pipes with tracebacks: on a terminal that runs a
# Textual app or prints a -p reply, that would be garbage. What matters reaches the user as states.
logging.getLogger("mcp").addHandler(logging.NullHandler())
logging.getLogger("mcp").propagate = False


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as offered to a model, already cleaned and bounded."""

    server: str  # the mcp.json server name
    name: str  # the tool name as the model sees it (unique across all servers)
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments (an object)

    def as_openai(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolResult:
    text: str  # cleaned, cut to the caller's limit
    is_error: bool  # the tool (or the call) failed; text says why in one sentence
    truncated_from: int | None = None  # original size in characters when cut


@dataclass(frozen=True, slots=True)
class ServerState:
    """A server as the servers screen shows it."""

    name: str
    state: State
    reason: str  # why it failed, or a note on tools left out; "" when there is nothing to say
    source: str  # its command line or URL
    tools: tuple[ToolSpec, ...] = field(default=())


class ToolBox:
    """Every configured server, started lazily; one per app, shared by all panes, thread-safe."""

    def __init__(self, servers: Sequence[ServerConfig], *, start_timeout: float = START_TIMEOUT) -> None:
        self._configs = list(servers)
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Connection] = {}
        self._names: dict[tuple[str, str], str] = {}  # (server, original name) -> name offered
        self._owners: dict[str, tuple[str, str]] = {}  # name offered -> (server, original name)
        self._states = {c.name: ServerState(c.name, "stopped", "", c.source) for c in self._configs}
        self._closed = False

    # ------------------------------------------------------------------------------ the contract
    def servers(self) -> list[ServerState]:
        """Every configured server, in the file's order, as it is now."""
        return [self._states[c.name] for c in self._configs]

    async def tools(self, servers: Iterable[str] | None = None) -> list[ToolSpec]:
        """The tools of these servers (all when None; unknown names are ignored), starting those that
        are not running and waiting until each is ready or failed; a failed server offers none."""
        wanted = None if servers is None else set(servers)
        return await self._run(self._tools(wanted))

    async def call(
        self, name: str, arguments: dict[str, Any], *, timeout: float, max_chars: int
    ) -> ToolResult:
        """Run the tool `name` offered by `tools`; its result cleaned and cut to `max_chars`."""
        return await self._run(self._call(name, arguments, timeout, max_chars))

    async def aclose(self) -> None:
        """Stop every server (no process is left behind) and the ToolBox's thread."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    # -------------------------------------------------------------------------- beyond the contract
    def start(self, server: str) -> None:
        """Start `server` unless it runs (a failed one is tried again); servers() follows it."""
        self._submit(self._start(server))

    def close(self) -> None:
        """aclose() for callers without an event loop (the -p path, exit handlers)."""
        with self._lock:
            self._closed, loop, thread = True, self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()

    # --------------------------------------------------------------------------- on the own loop
    async def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self._submit(coro))

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError("the ToolBox is closed")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="mcp-toolbox", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _connection(self, config: ServerConfig) -> Connection:
        if config.name not in self._connections:
            self._connections[config.name] = Connection(config, self._start_timeout, self._publish)
        return self._connections[config.name]

    async def _tools(self, wanted: set[str] | None) -> list[ToolSpec]:
        chosen = [self._connection(c) for c in self._configs if wanted is None or c.name in wanted]
        for connection in chosen:
            if connection.state == "stopped":
                connection.start()
        # Names are given in the file's order once the servers before have settled: wait for those too.
        starting = [c for c in self._connections.values() if c.state == "starting"]
        await asyncio.gather(*(c.settled() for c in {*chosen, *starting}))
        return [tool for c in chosen for tool in self._states[c.name].tools]

    async def _start(self, server: str) -> None:
        config = next((c for c in self._configs if c.name == server), None)
        if config is not None:
            self._connection(config).start()

    async def _stop_all(self) -> None:
        await asyncio.gather(*(c.stop() for c in self._connections.values()))

    def _publish(self) -> None:
        """A server's state changed: what servers() returns follows. Tools are named in the file's
        order; a ready server after one still starting waits for it (its tools are not shown yet)."""
        waiting = False
        for config in self._configs:
            connection = self._connections.get(config.name)
            if connection is None:
                continue
            naming = connection.state == "ready" and not waiting
            tools = tuple(self._spec(config.name, t) for t in connection.tools) if naming else ()
            state = ServerState(config.name, connection.state, connection.reason, config.source, tools)
            self._states[config.name] = state
            waiting = waiting or connection.state == "starting"

    def _spec(self, server: str, tool: ListedTool) -> ToolSpec:
        key = (server, tool.original)
        if key not in self._names:
            name = cleaning.tool_name(tool.original)
            if name in self._owners:
                name = cleaning.tool_name(f"{server}_{tool.original}")
            base, n = name, 2
            while name in self._owners:
                name = cleaning.tool_name(f"{base[:60]}_{n}")
                n += 1
            self._names[key], self._owners[name] = name, key
        return ToolSpec(server, self._names[key], tool.description, tool.parameters)

    async def _call(self, name: str, arguments: dict[str, Any], timeout: float, max_chars: int) -> ToolResult:
        owner = self._owners.get(name)
        if owner is None:
            return ToolResult(f"There is no tool named {cleaning.tool_name(name)!r}.", is_error=True)
        if not isinstance(arguments, dict):
            return ToolResult(f"The arguments of {name} must be a JSON object.", is_error=True)
        server, original = owner
        connection = self._connections[server]
        if connection.state == "stopped":
            connection.start()
            await connection.settled()
        try:
            result = await connection.call(original, arguments, timeout)
        except CallFailed as failure:
            return ToolResult(f"{failure}.", is_error=True)
        text, cut_from = cleaning.bounded_text(cleaning.result_pieces(result), max_chars)
        return ToolResult(text, bool(result.is_error), cut_from)
