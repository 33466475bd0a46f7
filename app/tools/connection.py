"""One MCP server as the ToolBox sees it: started on first use in a session task of its own, its state
(stopped, starting, ready, failed and why), its tools, and calls that end, whatever the server does.

    start() -> _run: transport -> relay -> ClientSession -> initialize, list tools -> "ready"
                     ... until stop() or the server goes away -> "stopped" / "failed: why"

The relay sits between the transport and the session: it sees the stream end (the server exited or
hung up) and lines that are not JSON-RPC, which fail the calls in flight with one clear line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx2  # the MCP SDK's HTTP client: its transport takes one to carry the headers
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED

from app.core.sanitize import strip_control
from app.tools import cleaning
from app.tools.config import HttpServer, ServerConfig, StdioServer
from app.tools.stderr_tail import StderrTail
from app.tools.stdio import MessageTooLong, stdio_transport

State = Literal["stopped", "starting", "ready", "failed"]
MAX_TOOLS = 128  # per server, as OpenAI's own limit per request
MAX_PAGES = 8
STDERR_DRAIN_SECONDS = 2.0  # for the last words of a server that exited to be read
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=None)  # a call's own timeout bounds the wait for its answer


class CallFailed(Exception):
    """The call did not produce a result: one sentence for the pane and the model."""


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool as the server listed it, cleaned: `original` is the name to call it by."""

    original: str
    description: str
    parameters: dict[str, Any]


class Connection:
    """One configured server. Lives on the ToolBox's event loop: every method runs there."""

    def __init__(self, config: ServerConfig, start_timeout: float, on_change: Callable[[], None]) -> None:
        self.config = config
        self.state: State = "stopped"
        self.reason = ""
        self.tools: list[ListedTool] = []
        self._start_timeout = start_timeout
        self._on_change = on_change
        self._session: ClientSession | None = None
        self._settled = asyncio.Event()  # ready or failed: tools() may go on
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stderr: StderrTail | None = None
        self._troubles: set[asyncio.Future[str]] = set()  # one per call in flight

    @property
    def name(self) -> str:
        return self.config.name

    def start(self) -> None:
        """Start the server unless it runs or is starting; a failed one is tried again."""
        if self._task is not None and not self._task.done():
            return
        self._settled, self._stop = asyncio.Event(), asyncio.Event()
        self._set("starting", "")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp-{self.name}")

    async def settled(self) -> None:
        await self._settled.wait()

    async def stop(self) -> None:
        if self._task is None:
            return
        self._stop.set()
        await asyncio.gather(self._task, return_exceptions=True)

    def _set(self, state: State, reason: str) -> None:
        self.state, self.reason = state, reason
        if state in ("ready", "failed"):
            self._settled.set()
        self._on_change()

    # ------------------------------------------------------------------------------------ session
    async def _run(self) -> None:
        try:
            async with self._transport() as (read, write), anyio.create_task_group() as group:
                send, receive = anyio.create_memory_object_stream[Any](0)
                ended = anyio.Event()
                group.start_soon(self._relay, read, send, ended)
                async with ClientSession(receive, write) as session:
                    with anyio.fail_after(self._start_timeout):
                        await session.initialize()
                        self.tools = await self._list_tools(session)
                    self._session = session
                    self._set("ready", self.reason)
                    async with anyio.create_task_group() as wait:
                        wait.start_soon(_first, wait, self._stop.wait)
                        wait.start_soon(_first, wait, ended.wait)
                    self._session = None
                group.cancel_scope.cancel()
            if self._stop.is_set():
                self._set("stopped", "")
            else:
                await self._stderr_drained()
                self._set("failed", self._gone_reason())
        except Exception as exc:  # any failure of a server is its state, never the app's
            cause = _leaf(exc)
            if isinstance(cause, TimeoutError):
                self._set("failed", self._with_stderr(f"did not answer within {self._start_timeout:g} s"))
            else:
                self._set("failed", self._with_stderr(_sentence(cause)))
        except asyncio.CancelledError:
            self._set("stopped", "")
            raise
        finally:
            self._session = None
            self._trouble(self._gone_reason(" during the call"))
            if self._stderr is not None:
                self._stderr.close()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        if isinstance(config, HttpServer):
            async with (
                httpx2.AsyncClient(headers=dict(config.headers), timeout=HTTP_TIMEOUT) as client,
                streamable_http_client(config.url, http_client=client) as streams,
            ):
                yield streams
            return
        assert isinstance(config, StdioServer)
        self._stderr = StderrTail()
        async with stdio_transport(config, self._stderr) as streams:
            yield streams

    async def _relay(self, read: Any, send: Any, ended: anyio.Event) -> None:
        """Transport -> session; a line that is not JSON-RPC fails the calls in flight."""
        async with send:
            async for item in read:
                if isinstance(item, MessageTooLong):
                    self._trouble(f"The server {self.name} sent {item}")
                elif isinstance(item, Exception):
                    self._trouble(f"The server {self.name} sent a line that is not JSON-RPC")
                else:
                    await send.send(item)
        ended.set()

    async def _list_tools(self, session: ClientSession) -> list[ListedTool]:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor or len(listed) >= MAX_TOOLS:
                break
        tools, refused = [], []
        for tool in listed[:MAX_TOOLS]:
            try:
                parameters = cleaning.parameters(tool.input_schema)
            except cleaning.SchemaRefused as why:
                refused.append(f"{cleaning.tool_name(tool.name)}: {why}")
                continue
            tools.append(ListedTool(tool.name, cleaning.description(tool.description), parameters))
        notes = [f"{r} (left out)" for r in refused[:3]]
        if len(listed) > MAX_TOOLS:
            notes.append(f"only the first {MAX_TOOLS} tools are offered")
        self.reason = "; ".join(notes)
        return tools

    async def _stderr_drained(self) -> None:
        if self._stderr is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._stderr.drained, STDERR_DRAIN_SECONDS)

    def _gone_reason(self, when: str = "") -> str:
        what = "exited" if isinstance(self.config, StdioServer) else "closed the connection"
        return self._with_stderr(f"The server {self.name} {what}{when}")

    def _with_stderr(self, sentence: str) -> str:
        """The sentence, and the last line the server wrote to stderr: often the reason, in its words."""
        said = self._stderr.last_line() if self._stderr is not None else ""
        return f"{sentence}; its last words: {said}" if said else sentence

    def _trouble(self, reason: str) -> None:
        for trouble in self._troubles:
            if not trouble.done():
                trouble.set_result(reason)

    # --------------------------------------------------------------------------------------- calls
    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> types.CallToolResult:
        """The server's result; CallFailed when there is none (the server failed, hung, went away, or
        answered with an error). Cancelling the caller cancels the request."""
        session = self._session
        if session is None:
            raise CallFailed(f"The server {self.name} is not running ({self.reason or self.state})")
        trouble: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        request = asyncio.ensure_future(session.call_tool(tool, arguments))
        self._troubles.add(trouble)
        try:
            done, _ = await asyncio.wait(
                {request, trouble}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self._troubles.discard(trouble)
            if not request.done():
                request.cancel()
                await asyncio.gather(request, return_exceptions=True)
        if request in done:
            try:
                return request.result()
            except MCPError as exc:
                if exc.error.code == CONNECTION_CLOSED:
                    await self._stderr_drained()
                    raise CallFailed(self._gone_reason(" during the call")) from None
                said = _sentence(exc.error.message)
                raise CallFailed(f"The server {self.name} answered with an error: {said}") from None
            except Exception as exc:  # a malformed result is the server's failure
                raise CallFailed(f"The server {self.name} failed: {_sentence(exc)}") from None
        if trouble in done:
            raise CallFailed(trouble.result())
        raise CallFailed(f"The tool {tool} did not answer within {timeout:g} s; the call was cancelled")


async def _first(group: anyio.abc.TaskGroup, wait: Callable[[], Any]) -> None:
    await wait()
    group.cancel_scope.cancel()


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the exception groups anyio's task groups wrap errors in."""
    while getattr(exc, "exceptions", None):  # an ExceptionGroup (a backport's on Python 3.10)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _sentence(what: object) -> str:
    text = " ".join(strip_control(str(what)).split())
    if isinstance(what, BaseException) and not text:
        text = type(what).__name__
    return text[:300]
