"""The tool-call loop of a pane session, without Textual: the real LocalBackend on the tiny checkpoint,
real MCP servers (tests/app/tools/servers.py, the SDK's server API, over stdio) behind a real ToolBox,
a real Store. Random weights call a tool because the pane forces it (tool_choice "required": every
reply of the turn is a call), so the step limit is what ends a turn that is let run.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.base import Backend
from app.backend.local import LocalBackend
from app.backend.remote import RemoteBackend
from app.core.conversation import ChatSettings, Conversation
from app.session import ConversationSaver, PaneSession, SessionContext
from app.session.tools import CANCELLED, LEFT_OPEN, NOT_RUN, Approval, PaneTools
from app.store.database import Store
from app.store.persistence import Saver
from app.tools.config import StdioServer
from app.tools.toolbox import ToolBox
from engine import Engine, EngineConfig, ToolCall
from tests.app.pilot_helpers import ENGINE
from tests.app.session.test_pane_session import RecordingView
from tests.app.tools.conftest import SERVERS, stdio_server

FORCED = ChatSettings(temperature=0.0, max_tokens=96)
LIMIT = 120.0  # seconds; only a hang reaches it


class RecordingCall:
    """A call block as the session drives it: what it asked, its status lines, its result."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.statuses: list[str] = []
        self.result: tuple[str, bool] | None = None

    def show_status(self, text: str) -> None:
        self.statuses.append(text)

    def show_result(self, text: str, is_error: bool) -> None:
        self.result = (text, is_error)


class ToolView(RecordingView):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[RecordingCall] = []

    async def add_tool_call(self, call: ToolCall) -> RecordingCall:
        self.calls.append(RecordingCall(call))
        return self.calls[-1]


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolBox]:
    pid_file = tmp_path_factory.mktemp("sleeper") / "pid"
    sleeper = StdioServer(
        "sleeper", sys.executable, (str(SERVERS), "sleeper"), {"SLEEPER_PID_FILE": str(pid_file)}
    )
    box = ToolBox([stdio_server("weather", "weather"), sleeper])
    yield box
    box.close()


def open_session(
    backend: Backend, store: Store, toolbox: ToolBox, servers: list[str], step_limit: int = 8
) -> tuple[PaneSession, ToolView]:
    saving = ConversationSaver(Saver(store))
    view = ToolView()
    conversation = Conversation(settings=ChatSettings(**{**FORCED.to_dict(), "tool_servers": servers}))
    session = PaneSession(conversation, SessionContext(backend, saving, toolbox), view, "pane-1")
    session.tools.choice, session.tools.step_limit = "required", step_limit
    saving.open = [session]
    return session, view


async def drive(session: PaneSession, view: ToolView, until: Callable[[], bool]) -> None:
    """Apply the backend's events as the pane's frames would, until `until()`; tool steps run meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIMIT
    while not until():
        assert loop.time() < deadline, f"stuck in state {session.state!r}"
        try:
            await asyncio.wait_for(view.woken.wait(), 0.05)
        except TimeoutError:
            continue
        view.woken.clear()
        await session.apply(session.inbox.take())


def asking(session: PaneSession, after: ToolCall | None = None) -> Callable[[], bool]:
    """A call waits for the user's answer (another than `after`, already answered)."""
    return lambda: session.asking is not None and session.asking is not after


def idle(session: PaneSession) -> Callable[[], bool]:
    return lambda: not session.busy


def roles(session: PaneSession) -> list[str]:
    return [m.role for m in session.conversation.messages]


async def test_approved_call_runs_its_result_goes_back_and_the_model_goes_on(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    session, view = open_session(backend, store, toolbox, ["weather"], step_limit=2)
    await session.send("Weather in Paris?")
    await drive(session, view, asking(session))
    assert session.state == "asking you" and session.turn is None  # the engine holds no request meanwhile
    call = session.asking
    assert call is not None and call.name == "weather"
    reply = session.conversation.messages[-1]
    assert reply.role == "assistant" and [c.id for c in reply.tool_calls] == [call.id]
    assert "y (run it once)" in view.calls[0].statuses[0]

    await session.submit_text("y")  # typed in the input box
    await drive(session, view, asking(session, after=call))  # the model went on, and called again
    result = session.conversation.messages[2]
    assert (result.role, result.tool_call_id, result.name) == ("tool", call.id, "weather")
    assert result.content.startswith("WEATHER-RESULT: sunny in ")
    assert view.calls[0].result == (result.content, False)
    assert result.content in session.backend.prepare(session.conversation).text  # sent back to the model
    assert view.steps[1:] == [(1, 2), (2, 2)]  # after the user's message (0), each step as it starts

    await session.submit_text("n it rains there anyway")
    await drive(session, view, idle(session))  # the third call passes the limit of 2 steps
    assert roles(session) == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    denied, not_run = session.conversation.messages[4], session.conversation.messages[6]
    assert denied.content == "The user denied this call. Their reason: it rains there anyway"
    assert not_run.content == NOT_RUN.format(limit=2)
    assert view.steps[-1] == (2, 2) and session.state == "idle"
    assert any("limit of 2 tool steps" in notice for notice in view.notices)

    saved = store.load(session.conversation.id)  # restored as it was: calls and results tied by id
    assert saved is not None
    assert [(m.role, m.content, m.tool_call_id, m.name) for m in saved.messages] == [
        (m.role, m.content, m.tool_call_id, m.name) for m in session.conversation.messages
    ]
    assert [m.tool_calls for m in saved.messages] == [m.tool_calls for m in session.conversation.messages]
    assert saved.settings.tool_servers == ["weather"]


async def test_always_runs_that_tool_again_without_asking(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    session, view = open_session(backend, store, toolbox, ["weather"], step_limit=2)
    await session.send("Weather in Oslo?")
    await drive(session, view, asking(session))
    assert session.answer(Approval("always"))  # the pane's key
    await drive(session, view, idle(session))
    assert roles(session) == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    results = [m.content for m in session.conversation.messages if m.role == "tool"]
    assert all(r.startswith("WEATHER-RESULT") for r in results[:2]) and results[2] == NOT_RUN.format(limit=2)
    assert [bool(c.statuses) and c.statuses[0].startswith("Run it?") for c in view.calls] == [
        True,
        False,
        False,
    ]
    assert view.calls[2].result == (NOT_RUN.format(limit=2), True)
    assert session.tools.always == {"weather"}

    await session.send("And tomorrow?")  # a new turn: its steps count from 0, "always" stays
    await drive(session, view, idle(session))
    assert view.steps[-1] == (2, 2) and session.asking is None and len(view.calls) == 6


async def test_a_fork_runs_the_tools_its_parent_always_runs_and_offers_the_same_servers(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    parent, parent_view = open_session(backend, store, toolbox, ["weather"], step_limit=1)
    await parent.send("Weather in Lima?")
    await drive(parent, parent_view, asking(parent))
    assert parent.answer(Approval("always"))
    await drive(parent, parent_view, idle(parent))

    fork = parent.fork(None)
    assert fork is not None and fork.tools.always == {"weather"}
    servers = fork.conversation.settings.tool_servers
    assert servers == ["weather"] and servers is not parent.conversation.settings.tool_servers
    view = ToolView()  # the new pane, as the screen opens it
    child = PaneSession(fork.conversation, parent.context, view, "pane-2", fork.tools)
    await child.send("And in Quito?")
    await drive(child, view, idle(child))
    assert roles(child)[-5:] == ["user", "assistant", "tool", "assistant", "tool"]
    assert child.conversation.messages[-3].content.startswith("WEATHER-RESULT")  # run, not asked about
    assert not any(call.statuses and call.statuses[0].startswith("Run it?") for call in view.calls)

    child.tools.always.add("sleeper")  # an "always" given in the fork stays in the fork
    assert parent.tools.always == {"weather"}


async def test_a_call_left_open_gets_its_result_when_the_chat_is_opened_again_or_forked(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    """lfm-chat killed while it asked about a call leaves the chat ending with the call; opened
    again (or forked at the call), the call gets a result, saved, so a server accepts the chat."""
    session, view = open_session(backend, store, toolbox, ["weather"], step_limit=1)
    await session.send("Weather in Paris?")
    await drive(session, view, asking(session))
    call = session.asking
    restored = store.load(session.conversation.id)  # what a kill -9 now leaves
    fork = session.fork(1)  # through the reply that made the call
    assert restored is not None and fork is not None and call is not None
    assert restored.messages[-1].tool_calls == [call] == fork.conversation.messages[-1].tool_calls
    for conversation, tag in ((restored, "pane-2"), (fork.conversation, "pane-3")):
        reopened_view = ToolView()
        reopened = PaneSession(conversation, session.context, reopened_view, tag)
        await reopened.start()
        assert roles(reopened) == ["user", "assistant", "tool"]
        result = reopened.conversation.messages[-1]
        assert (result.tool_call_id, result.name, result.content) == (call.id, "weather", LEFT_OPEN)
        assert reopened_view.shown[-1] == reopened.conversation.messages
    saved = store.load(restored.id)  # type: ignore[arg-type]
    assert saved is not None and saved.messages[-1].content == LEFT_OPEN
    assert session.stop()
    await drive(session, view, idle(session))


async def test_esc_during_a_tool_that_never_answers_cancels_the_call_and_the_turn(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    session, view = open_session(backend, store, toolbox, ["sleeper"])
    await session.send("Sleep.")
    await drive(session, view, asking(session))
    session.answer(Approval("once"))
    await drive(session, view, lambda: session.state == "waiting on tool")
    await asyncio.sleep(0.5)  # the call is with the server, which never answers
    assert session.stop()
    await drive(session, view, idle(session))
    assert roles(session) == ["user", "assistant", "tool"] and session.state == "stopped"
    assert session.conversation.messages[-1].content == CANCELLED
    assert view.calls[0].result == (CANCELLED, True)

    await session.send("Again.")  # the pane works on: the next turn asks again
    await drive(session, view, asking(session, after=view.calls[0].call))
    assert session.stop()  # Esc while asking ends the turn too
    await drive(session, view, idle(session))
    assert roles(session)[-3:] == ["user", "assistant", "tool"] and session.state == "stopped"


async def test_a_pane_without_servers_offers_no_tools_and_replies_as_before(
    backend: LocalBackend,
    store: Store,
    toolbox: ToolBox,
) -> None:
    session, view = open_session(backend, store, toolbox, [])
    assert session.tools.summary(toolbox, session.conversation.settings) == ""
    # None offers every server: "tools" before they start, "1+ tools" while one has, "2 tools" after
    assert re.fullmatch(r"(\d+\+? )?tools", session.tools.summary(toolbox, FORCED))
    await session.send("Hello!")
    await drive(session, view, idle(session))
    assert roles(session) == ["user", "assistant"] and not view.calls
    assert session.conversation.messages[-1].tool_calls == []


async def test_the_border_says_1_tool_and_2_tools(toolbox: ToolBox) -> None:
    one, both = (replace(FORCED, tool_servers=servers) for servers in (["sleeper"], ["sleeper", "weather"]))
    assert await PaneTools.offered(toolbox, both)  # both servers started: one tool each
    assert PaneTools.summary(toolbox, one) == "1 tool" and PaneTools.summary(toolbox, both) == "2 tools"


def test_answers_typed_in_the_box() -> None:
    from app.session.tools import parse_answer

    assert parse_answer(" Y ") == Approval("once")
    assert parse_answer("a") == Approval("always")
    assert parse_answer("n") == Approval("deny", "")
    assert parse_answer("no  not   now") == Approval("deny", "not now")
    assert parse_answer("yes please") is None and parse_answer("maybe") is None


async def test_on_a_server_the_tools_go_as_tools_and_the_calls_come_back_as_tool_calls(
    tiny_ckpt: Path, store: Store, toolbox: ToolBox
) -> None:
    """--server against `lfm-chat serve` on the tiny checkpoint: the request carries `tools` and
    tool_choice, the server's `tool_calls` become the reply's calls, the results go back as `tool`
    messages the server accepts."""
    serving = pytest.importorskip("tests.asgi_server").serving  # needs the serve extra
    server_app, server_config = pytest.importorskip("server.app"), pytest.importorskip("server.config")
    engine = Engine.from_pretrained(tiny_ckpt, EngineConfig(**ENGINE), progress=lambda stage, fraction: None)
    with serving(server_app.create_app(engine, server_config.ServerConfig(model_name="tiny"))) as url:
        remote = RemoteBackend.connect(url, None, None)
        try:
            session, view = open_session(remote, store, toolbox, ["weather"], step_limit=1)
            await session.send("Weather in Paris?")
            await drive(session, view, asking(session))
            call = session.asking
            assert call is not None and call.name == "weather"
            await session.submit_text("y")
            await drive(session, view, idle(session))
        finally:
            remote.close()
    assert roles(session) == ["user", "assistant", "tool", "assistant", "tool"]
    first, result = session.conversation.messages[1:3]
    assert [c.name for c in first.tool_calls] == ["weather"] and result.tool_call_id == call.id
    assert result.content.startswith("WEATHER-RESULT: sunny in ")
    assert session.conversation.messages[4].content == NOT_RUN.format(limit=1)  # the server forced a 2nd call
