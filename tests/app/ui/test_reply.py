"""A reply's parts while it streams: thinking shows as it is written and folds when the answer starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from textual.app import App, ComposeResult

from app.core.export import reply_markdown
from app.core.reply_parts import Part, answer_text, split_reply
from app.core.sanitize import strip_control
from app.ui.widgets.markdown_lines import CodeBlock
from app.ui.widgets.reply import AnswerMarkdown, Reply, ThinkingBlock, ToolCallBlock
from app.ui.widgets.stream_slack import SLACK_ROWS


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("plain", [Part("text", "plain")]),
        ("<think>still", [Part("thinking", "still", closed=False)]),
        ("<think>a b</think>Answer", [Part("thinking", "a b"), Part("text", "Answer")]),
        # a template that opens <think> in the prompt leaves only the closing tag in the reply
        ("reasoning</think>\n\nAnswer", [Part("thinking", "reasoning"), Part("text", "\n\nAnswer")]),
        (
            "Call:<|tool_call_start|>[f(x=1)]<|tool_call_end|>ok",
            [Part("text", "Call:"), Part("tool_call", "[f(x=1)]"), Part("text", "ok")],
        ),
        ("<|tool_call_start|>[f(", [Part("tool_call", "[f(", closed=False)]),
        ("x <|tool_call_end|> y", [Part("text", "x <|tool_call_end|> y")]),  # closes nothing: text
    ],
)
def test_split_reply(text: str, parts: list[Part]) -> None:
    assert split_reply(text) == parts


def test_the_answer_leaves_out_thinking_and_markers() -> None:
    text = "<think>hidden</think>Use <|tool_call_start|>[f()]<|tool_call_end|>"
    assert answer_text(text) == "Use [f()]"
    exported = reply_markdown(text)
    assert "<details><summary>Thinking</summary>" in exported and "```tool-call\n[f()]\n```" in exported
    assert "<think>" not in exported and "<|tool_call" not in exported


class ReplyHost(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.reply = Reply()

    def compose(self) -> ComposeResult:
        yield self.reply


async def test_thinking_streams_in_view_then_folds_when_the_answer_starts() -> None:
    app = ReplyHost()
    async with app.run_test() as pilot:
        reply = app.reply
        await reply.update("<think>Let me")
        await pilot.pause()
        thinking = reply.query_one(ThinkingBlock)
        assert thinking.body.display and "Thinking…" in str(thinking.header.render())

        await reply.update("<think>Let me see</think>The ans")
        await reply.update("<think>Let me see</think>The answer is 4.")
        await reply.finish()
        await pilot.pause()
        assert reply.query_one(ThinkingBlock) is thinking  # the same block, now folded
        assert not thinking.body.display and str(thinking.header.render()).startswith("▸ Thought · 3 words")
        assert reply.query_one(AnswerMarkdown).source == "The answer is 4."

        await pilot.click(ThinkingBlock)
        assert thinking.body.display  # a click opens it
        reply.set_thinking_shown(False)
        assert not thinking.body.display


async def test_streaming_thinking_grows_into_rows_laid_out_before_and_fits_once_folded_open() -> None:
    """The thought being written is laid out SLACK_ROWS rows at a time (stream_slack), so most of
    its new rows need no layout of the screen; once closed and opened, it is as tall as its text."""
    app = ReplyHost()
    async with app.run_test(size=(30, 120)) as pilot:
        words, heights = [f"word{i}" for i in range(120)], set()
        for end in range(2, len(words) + 1):
            await app.reply.update("<think>" + " ".join(words[:end]))
            await pilot.pause()
            if end > 2:  # the first update makes the block; the ones after stream into it
                heights.add(app.reply.query_one(ThinkingBlock).body.size.height)
        assert all(height % SLACK_ROWS == 0 for height in heights), sorted(heights)
        assert 3 < 2 * len(heights) < max(heights)  # ~30 rows written, a layout every few
        await app.reply.update("<think>" + " ".join(words) + "</think>Done.")
        app.reply.set_thinking_shown(True)
        await pilot.pause()
        body = app.reply.query_one(ThinkingBlock).body
        assert body.size.height == len(wrap_text(" ".join(words), body.size.width)) < max(heights) + 1


def wrap_text(text: str, width: int) -> list[str]:
    return [text[i : i + width] for i in range(0, len(text), width)]


async def test_a_rewritten_reply_is_redrawn_part_by_part() -> None:
    app = ReplyHost()
    async with app.run_test() as pilot:
        reply = app.reply
        await reply.update("Calling <|tool_call_start|>[f(x=")
        await reply.update("Calling <|tool_call_start|>[f(x=1)]<|tool_call_end|>")
        await pilot.pause()
        call = reply.query_one(ToolCallBlock)
        # the tool's name, then its arguments as indented JSON: what the user approves
        assert call.border_title == "tool call" and call.render().plain == 'f\n{\n  "x": 1\n}'  # type: ignore[union-attr]
        await reply.update("Something else entirely")  # not an extension: the parts are rebuilt
        await reply.finish()
        await pilot.pause()
        assert not reply.query(ToolCallBlock)
        assert reply.query_one(AnswerMarkdown).source == "Something else entirely"


async def test_a_reply_is_drawn_without_disputed_widths_and_copied_whole() -> None:
    """A reply's "⚠️" and "👍🏽" are drawn as "⚠" and "👍", whose widths every terminal agrees on
    (a pane's border stays put in tmux); copying the reply gives the model's characters."""
    app = ReplyHost()
    async with app.run_test() as pilot:
        reply = app.reply
        text = "\u26a0\ufe0f Careful \U0001f44d\U0001f3fd"
        await reply.update(text[:3])
        await reply.update(text)
        await reply.finish()
        await pilot.pause()
        assert reply.query_one(AnswerMarkdown).source == "\u26a0 Careful \U0001f44d"
        assert reply.answer == text


class NarrowHost(App[None]):
    CSS_PATH = Path(__file__).parents[3] / "app" / "lfm_chat.tcss"  # the app's own rules for replies

    def __init__(self) -> None:
        super().__init__()
        self.reply = Reply("```python\n" + "x = " + "1 + " * 40 + "1\n```\n")

    def compose(self) -> ComposeResult:
        yield self.reply


async def test_a_code_block_wider_than_a_narrow_pane_wraps_and_loses_nothing() -> None:
    app = NarrowHost()
    async with app.run_test(size=(40, 20)) as pilot:
        await pilot.pause()
        block = app.reply.query_one(CodeBlock)
        drawn = "".join(block.render_line(y).text for y in range(block.size.height))
        assert block.size.width <= 40 and block.code == "x = " + "1 + " * 40 + "1\n"
        assert drawn.split() == block.code.split()  # every term on screen, in order, none cut off


CONTROLS_AND_MARKERS = "\x1b\x9b\x9c\x9d\x90[]P^_\\;0:m\x07\x00\r\n\ta<>/think"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=CONTROLS_AND_MARKERS), st.lists(st.integers(0, 60)))
def test_a_streamed_reply_cleans_only_what_came_and_reads_as_the_text_cleaned_whole(
    raw: str, cuts: list[int]
) -> None:
    """Each update cleans what it adds (a long reply's whole pass cost ~1 ms a frame), and the
    reply's source is still exactly `strip_control` of the text so far, at every update."""

    async def stream() -> None:
        reply = Reply()
        for end in [*sorted(min(cut, len(raw)) for cut in cuts), len(raw)]:
            await reply.update(raw[:end])
            assert reply.source == strip_control(raw[:end])
        await reply.update("other text")  # not an extension: cleaned whole
        assert reply.source == "other text"

    asyncio.run(stream())
