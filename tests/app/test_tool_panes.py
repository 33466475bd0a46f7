"""Panes using tools beside plain panes, in the app: two panes call a real MCP server's tool (the
weather server of tests/app/tools/servers.py, over stdio, from an mcp.json given with --mcp) while
two plain panes stream; every message stays in its own pane, and a pane waiting on a tool or on
its user holds no request in the engine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from textual.app import App, ComposeResult

from app.app import LfmChatApp
from app.core.conversation import ChatMessage, ChatSettings
from app.core.sanitize import strip_control
from app.session.tools import NOT_RUN
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.tool_message import ToolMessage
from app.ui.widgets.transcript import Transcript
from tests.app.pilot_helpers import MakeOptions, Reference, chat_screen, submit, user, wait_until
from tests.app.tools.conftest import SERVERS

SETTINGS = ChatSettings(temperature=0.0, max_tokens=96)
ESC = "\x1b]0;pwned\x07\x1b[2J"


def weather_mcp_json(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": [str(SERVERS), "weather"]}
    path.write_text(json.dumps({"mcpServers": {"weather": server}}))
    return path


def asking(pane: ChatPane) -> bool:
    return pane.session.asking is not None


def roles(pane: ChatPane) -> list[str]:
    return [m.role for m in pane.conversation.messages]


async def test_two_tool_panes_and_two_plain_panes_at_once(
    make_options: MakeOptions, reference: Reference, tmp_path: Path
) -> None:
    app = LfmChatApp(make_options(panes=4, chat=SETTINGS, mcp_file=weather_mcp_json(tmp_path)))
    async with app.run_test(size=(200, 60)) as pilot:
        screen = await chat_screen(app, pilot)
        await wait_until(pilot, lambda: screen.context.sessions.toolbox is not None, "the ToolBox")
        tool_panes, plain_panes = screen.panes[:2], screen.panes[2:]
        for pane in tool_panes:
            pane.session.tools.choice, pane.session.tools.step_limit = "required", 1
        for pane in plain_panes:
            pane.conversation.settings.tool_servers = []  # what ctrl+s saves with every server unticked
            pane.changed()
        assert all("tools" in str(p.border_subtitle) for p in tool_panes)
        assert not any("tools" in str(p.border_subtitle) for p in plain_panes)

        questions = ["Weather in Paris?", "Weather in Oslo?", "Tell me a story.", "Name a colour."]
        for pane, question in zip(screen.panes, questions, strict=True):
            await submit(pilot, pane, question)
        await wait_until(pilot, lambda: all(asking(p) for p in tool_panes), "both tool panes to ask")
        assert all(p.session.turn is None for p in tool_panes)  # no request in the engine while asking
        assert all(p.status.state == "asking you" for p in tool_panes)
        assert "tool step 1/1" in tool_panes[0].status.describe()
        labels = [f"pane {p.label}" for p in tool_panes]
        await wait_until(
            pilot,
            lambda: screen.dashboard.tool_waits == dict.fromkeys(labels, "you"),
            "the dashboard's waits",
        )

        await submit(pilot, tool_panes[0], "y")  # typed
        tool_panes[1].focus_input()
        await pilot.press("alt+y")  # the key
        await wait_until(pilot, lambda: not any(p.busy for p in screen.panes), "every pane to finish")

        await wait_until(pilot, lambda: screen.dashboard.tool_waits == {}, "the dashboard's waits to clear")
        for pane in tool_panes:  # called, ran, went on, called again past the limit of 1 step
            assert roles(pane) == ["user", "assistant", "tool", "assistant", "tool"]
            result, not_run = pane.conversation.messages[2], pane.conversation.messages[4]
            assert result.content.startswith("WEATHER-RESULT: sunny in ")
            assert not_run.content == NOT_RUN.format(limit=1)
            shown = list(pane.transcript.query(ToolMessage))
            assert [m.result for m in shown] == [result.content, not_run.content]
        for pane, question in zip(plain_panes, questions[2:], strict=True):
            want = strip_control(reference(user(question), SETTINGS).text)  # as if run alone
            assert [(m.role, m.content) for m in pane.conversation.messages] == [
                ("user", question),
                ("assistant", want),
            ]
            assert not list(pane.transcript.query(ToolMessage))
        assert tool_panes[0].conversation.messages[0].content == questions[0]
        assert tool_panes[1].conversation.messages[0].content == questions[1]

        saved = app.store.load(tool_panes[0].conversation.id)  # type: ignore[union-attr, arg-type]
        assert saved is not None and [m.role for m in saved.messages] == roles(tool_panes[0])


class TranscriptHost(App[None]):
    """A restored transcript alone: no engine is needed to draw saved messages."""

    def __init__(self, messages: list[ChatMessage]) -> None:
        super().__init__()
        self.transcript = Transcript(messages)

    def compose(self) -> ComposeResult:
        yield self.transcript


async def test_a_restored_tool_result_is_folded_to_its_first_lines_and_opens_on_a_click() -> None:
    lines = "\n".join(f"line {i}" for i in range(1, 11))
    messages = [
        ChatMessage("user", "Weather?"),
        ChatMessage("assistant", '<|tool_call_start|>[weather(city="Paris")]<|tool_call_end|>'),
        ChatMessage("tool", ESC + lines, tool_call_id="call_1", name=ESC + "weather"),
    ]
    app = TranscriptHost(messages)
    async with app.run_test(size=(100, 40)) as pilot:
        result = app.transcript.query_one(ToolMessage)
        body = str(result.body.render())
        assert body.startswith("line 1") and "line 6" in body and "line 7" not in body
        assert f"4 more lines · {len(ESC + lines):,} characters" in body and "\x1b" not in body
        assert "\x1b" not in str(result.border_title) and "weather" in str(result.border_title)
        await pilot.click(result)
        assert "line 10" in str(result.body.render())
        app.transcript.select(result)
        assert app.transcript.selected_message() == 2  # a tool message counts as a message (fork)
