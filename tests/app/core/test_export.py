"""An export says what produced the conversation (model, sampling, system prompt, date) and which
replies were cut short by the user, so it can be read without the app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.app import LfmChatApp
from app.core.conversation import ChatMessage, ChatSettings, Conversation
from app.core.export import conversation_markdown
from app.core.options import AppOptions
from engine import DEFAULT_MODEL, ToolCall
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, streamed, submit, wait_until

MakeOptions = Callable[..., AppOptions]


def test_a_tool_call_and_its_result_are_exported_without_escapes() -> None:
    call = ToolCall("weather", '{"city": "Paris"}', "call_1")
    reply = '<|tool_call_start|>[weather(city="Paris")]<|tool_call_end|>'
    chat = Conversation(
        [
            ChatMessage("user", "Weather?"),
            ChatMessage("assistant", reply, tool_calls=[call]),
            ChatMessage("tool", "\x1b[31msunny\x1b[0m", tool_call_id="call_1", name="weather"),
        ]
    )
    text = conversation_markdown(chat, "tiny", exported_at=0.0)
    assert '```tool-call\n[weather(city="Paris")]\n```' in text
    assert "## Tool result · weather\n\n````text\nsunny\n````" in text and "\x1b" not in text


def test_the_header_names_model_sampling_system_prompt_and_date() -> None:
    settings = ChatSettings(system_prompt="Be\x1b[2J brief.", temperature=0.7, top_p=0.9, max_tokens=60)
    chat = Conversation([ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello")], settings)
    markdown = conversation_markdown(chat, model="LFM2-350M\x1b]0;x\x07", exported_at=0.0)
    header = markdown.split("## You")[0]
    assert "Model: LFM2-350M" in header and "\x1b" not in header
    assert "temperature 0.7" in header and "top_p 0.9" in header and "max_tokens 60" in header
    assert "System: Be brief." in header
    assert "1970-01-01" in header


async def test_a_stopped_reply_is_marked_in_the_export(make_options: MakeOptions, tmp_path: Path) -> None:
    with FakeServer(words=["word "] * 200) as server:
        server.delay = 0.1
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            pane = screen.panes[0]
            await submit(pilot, pane, "Go on")
            await wait_until(pilot, lambda: streamed(pane), "a first word")
            await pilot.press("escape")
            await wait_until(pilot, lambda: pane.status.state == "stopped", "the reply stopped")
            await pilot.press("ctrl+o")
            exports = tmp_path / "data" / "exports"
            await wait_until(pilot, lambda: exports.is_dir() and any(exports.iterdir()), "an export")
            markdown = next(exports.iterdir()).read_text()
    assert "Model: fake" in markdown and "temperature 0.0" in markdown
    assert "## Assistant (stopped)" in markdown
