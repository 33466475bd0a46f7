"""The ToolBox against real MCP servers: tools listed and called over stdio and streamable HTTP, and
everything a hostile server does ending as a clean, bounded result or one clear sentence."""

from __future__ import annotations

import asyncio

import pytest

from app.tools.config import HttpServer
from app.tools.toolbox import ToolBox, ToolSpec
from tests.app.tools.conftest import stdio_server

pytestmark = pytest.mark.subprocess  # every test here starts MCP servers


def by_name(tools: list[ToolSpec]) -> dict[str, ToolSpec]:
    return {tool.name: tool for tool in tools}


async def test_tools_start_lazily_and_are_listed_cleaned(toolbox: ToolBox) -> None:
    assert {s.state for s in toolbox.servers()} <= {"stopped", "ready"}
    tools = by_name(await toolbox.tools())
    assert [s.state for s in toolbox.servers()] == ["ready", "ready"]
    assert tools["add"].server == "calc"
    assert tools["add"].parameters["properties"].keys() == {"a", "b"}
    add = tools["add"]
    assert add.as_openai() == {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": add.parameters},
    }
    # the hostile server's "add" is another tool: offered under its server's name
    assert tools["hostile_add"].server == "hostile"
    # escape sequences gone from names and descriptions, names as OpenAI allows them
    evil = tools["evilname"]
    assert evil.description == "Clears your screen."
    assert all(c.isalnum() or c in "_-" for tool in tools.values() for c in tool.name)


async def test_only_the_servers_asked_for(toolbox: ToolBox) -> None:
    assert {t.server for t in await toolbox.tools(["calc", "not-configured"])} == {"calc"}


async def test_a_call_runs_on_the_right_server(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("add", {"a": 2, "b": 3}, timeout=30, max_chars=100)
    assert (result.text, result.is_error, result.truncated_from) == ("5", False, None)
    other = await toolbox.call("hostile_add", {"a": 2, "b": 3}, timeout=30, max_chars=100)
    assert other.text == "hostile 5"


async def test_a_bad_call_is_a_result_not_an_exception(toolbox: ToolBox) -> None:
    await toolbox.tools()
    unknown = await toolbox.call("rm_rf", {}, timeout=30, max_chars=100)
    assert unknown.is_error and "no tool named 'rm_rf'" in unknown.text
    wrong = await toolbox.call("add", {"a": "two"}, timeout=30, max_chars=1000)
    assert wrong.is_error


async def test_escape_sequences_never_reach_the_result(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("evilname", {}, timeout=30, max_chars=1000)
    assert result.text == "result with escapes"


async def test_a_50_mb_result_is_cut_and_says_so(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("huge", {}, timeout=300, max_chars=1000)
    assert result.truncated_from == 50 * 2**20
    assert result.text.startswith("x" * 1000)
    assert "the result is 52,428,800 characters; the first 1,000 are shown" in result.text
    assert len(result.text) < 1100


async def test_a_tool_that_never_answers_ends_at_its_timeout(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("hang", {}, timeout=0.5, max_chars=100)
    assert result.is_error
    assert result.text == "The tool hang did not answer within 0.5 s; the call was cancelled."
    assert (await toolbox.call("hostile_add", {"a": 1, "b": 1}, timeout=30, max_chars=10)).text == "hostile 2"


async def test_cancelling_the_caller_cancels_the_call(toolbox: ToolBox) -> None:
    await toolbox.tools()
    call = asyncio.ensure_future(toolbox.call("hang", {}, timeout=3600, max_chars=100))
    await asyncio.sleep(0.2)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert (await toolbox.call("hostile_add", {"a": 1, "b": 2}, timeout=30, max_chars=10)).text == "hostile 3"


async def test_a_line_that_is_not_json_rpc_fails_the_call(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("garbage", {}, timeout=3600, max_chars=100)
    assert result.is_error
    assert result.text == "The server hostile sent a line that is not JSON-RPC."


async def test_a_stderr_flood_is_drained_and_forgotten(toolbox: ToolBox) -> None:
    await toolbox.tools()
    result = await toolbox.call("flood", {}, timeout=300, max_chars=100)
    assert result.text == "flooded"
    tail = toolbox._connections["hostile"]._stderr  # the bound is the point
    assert tail is not None and len(tail.text()) <= 4096


async def test_a_server_that_dies_mid_call_fails_it_and_says_why() -> None:
    box = ToolBox([stdio_server("doomed", "hostile")])
    try:
        await box.tools()
        result = await box.call("crash", {}, timeout=300, max_chars=1000)
        assert result.is_error
        assert result.text == (
            "The server doomed exited during the call; its last words: hostile: crashing on purpose."
        )
        await asyncio.sleep(0)  # the state follows from the session's own task
        (state,) = box.servers()
        while state.state == "ready":
            await asyncio.sleep(0.05)
            (state,) = box.servers()
        assert state.state == "failed" and "crashing on purpose" in state.reason
        assert state.tools == ()
        again = await box.call("crash", {}, timeout=300, max_chars=1000)
        assert again.is_error and "not running" in again.text
    finally:
        await box.aclose()


async def test_a_server_that_cannot_start_fails_with_its_reason(tmp_path) -> None:
    box = ToolBox([stdio_server("nothing", "no-such-kind")])
    try:
        assert await box.tools() == []
        (state,) = box.servers()
        assert state.state == "failed"
        assert "KeyError: 'no-such-kind'" in state.reason
    finally:
        await box.aclose()


async def test_streamable_http(http_calc: HttpServer) -> None:
    box = ToolBox([http_calc])
    try:
        tools = by_name(await box.tools())
        assert {"add", "echo"} <= tools.keys() and tools["add"].server == "remote"
        echoed = await box.call("echo", {"text": "hi \x1b[31mthere"}, timeout=30, max_chars=100)
        assert echoed.text == "hi there"
        result = await box.call("slow", {"seconds": 3600}, timeout=0.5, max_chars=100)
        assert result.is_error and "did not answer within 0.5 s" in result.text
    finally:
        await box.aclose()
