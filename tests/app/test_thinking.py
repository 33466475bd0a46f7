"""Thinking and tool calls, from a model that really writes them (tests/app/scripted.py).

A thinking reply folds its thinking once the answer starts, ctrl+t opens it again, and the
template's stripping of past thinking does not cost the prefix cache what came before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui.widgets.reply import AnswerMarkdown, ThinkingBlock, ToolCallBlock
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied
from tests.app.scripted import write_scripted_checkpoint

THINKING_REPLY = "<think>Plan it</think>Done"
TOOL_REPLY = "Calling:<|tool_call_start|>[f(x=1)]<|tool_call_end|>"
SETTINGS = ChatSettings(system_prompt="You are careful. Think first, then answer.", temperature=0.0)


@pytest.fixture(scope="module")
def thinking_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scripted_checkpoint(tmp_path_factory.mktemp("thinking"), THINKING_REPLY)


@pytest.fixture(scope="module")
def tool_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scripted_checkpoint(tmp_path_factory.mktemp("tools"), TOOL_REPLY)


async def test_thinking_folds_and_turn_three_reuses_the_cache(
    make_options: MakeOptions, thinking_ckpt: Path
) -> None:
    app = LfmChatApp(make_options(model=str(thinking_ckpt), panes=1, chat=SETTINGS))
    async with app.run_test(size=(100, 30)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        for turn, text in enumerate(["Hello there, how are you?", "Tell me more.", "And then?"], start=1):
            await submit(pilot, pane, text)
            await wait_replied(pilot, pane, turns=turn)
        replies = [m.content for m in pane.conversation.messages if m.role == "assistant"]
        assert replies == [THINKING_REPLY] * 3

        # The template strips reply 1's thinking in turn 3's prompt; what came before reply 1 is reused.
        metrics = pane.status.metrics
        assert metrics is not None and metrics.cached_prompt_tokens > 0
        assert f"({metrics.cached_prompt_tokens} cached)" in pane.status.describe()

        reply = pane.transcript.replies[-1]
        thinking, answer = reply.query_one(ThinkingBlock), reply.query_one(AnswerMarkdown)
        assert answer.source == "Done" and reply.answer == "Done"
        assert not thinking.body.display  # folded once the answer started
        assert str(thinking.header.render()).startswith("▸ Thought · 2 words")
        await pilot.press("alt+t")
        assert all(block.body.display for block in pane.query(ThinkingBlock))
        assert thinking.body.render().plain == "Plan it"  # type: ignore[union-attr]
        await pilot.press("alt+t")
        assert not any(block.body.display for block in pane.query(ThinkingBlock))


async def test_a_tool_call_is_a_labelled_block(make_options: MakeOptions, tool_ckpt: Path) -> None:
    app = LfmChatApp(make_options(model=str(tool_ckpt), panes=1, chat=SETTINGS))
    async with app.run_test(size=(100, 30)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "What is f(1)?")
        await wait_replied(pilot, pane)
        assert pane.conversation.messages[-1].content == TOOL_REPLY  # markers kept for the template
        reply = pane.transcript.replies[-1]
        call = reply.query_one(ToolCallBlock)
        assert call.render().plain == 'f\n{\n  "x": 1\n}'  # type: ignore[union-attr]  # name, pretty JSON
        assert call.border_title == "tool call"
        assert reply.answer == "Calling:[f(x=1)]"
        assert "<|tool_call" not in reply.query_one(AnswerMarkdown).source
