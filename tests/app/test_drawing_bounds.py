"""Replies that are huge to draw, streamed from a server into a real pane: what is mounted stays
bounded (widgets, memory) while they stream, a keypress is handled meanwhile, and again after a
relaunch restores the conversation. Before the bounds a 50,000-row table froze the app for minutes
at 4.9 GB (issue 42): the assertions are on structure, never on time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual import events
from textual.app import App, ComposeResult

from app.app import LfmChatApp
from app.core.conversation import ChatMessage
from app.core.options import AppOptions
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.markdown_lines import MarkdownSegment
from app.ui.widgets.reply import PlainSegment
from app.ui.widgets.transcript import SHOWN_REPLIES, Transcript
from engine import DEFAULT_MODEL
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, streamed, submit, wait_replied, wait_until

MakeOptions = Callable[..., AppOptions]
CHUNK = 2048  # characters a streamed delta carries

HUGE = {
    "table": "|n|odd|\n|-|-|\n" + "".join(f"|{n}|{n % 2}|\n" for n in range(50_000)),  # 500 KB
    "code": "```python\n" + "print('a line of code in a long block')\n" * 22_000 + "```\n",
    "emphasis": "*one* **two** _three_ " * 42_000,
}
MOUNTED_BOUND = 3_000  # widgets in the whole pane; a mounted 50,000-row table was ~150,000 cells
RSS_GROWTH_BOUND = 400 << 20


def rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def mounted(pane: ChatPane) -> int:
    return len(list(pane.query("*")))


async def type_a_key(pilot, pane: ChatPane) -> None:  # type: ignore[no-untyped-def]
    """A key goes to the input while the reply is drawn (not pilot.press: it waits for idle)."""
    before = pane.prompt_input.text
    pane.app.post_message(events.Key("x", "x"))
    await wait_until(pilot, lambda: pane.prompt_input.text == before + "x", "the key on screen")


@pytest.mark.parametrize("kind", sorted(HUGE))
async def test_a_huge_reply_is_drawn_within_bounds_while_streaming_and_after_relaunch(
    make_options: MakeOptions, kind: str
) -> None:
    text = HUGE[kind]
    words = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
    with FakeServer(words=words) as server:
        server.delay = 0.02  # ~5 s of streaming: the keypress lands while it draws
        options = make_options(server=server.url, model=DEFAULT_MODEL, panes=1)
        app = LfmChatApp(options)
        async with app.run_test(size=(100, 40)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            start = rss()
            await submit(pilot, pane, "Draw it")
            await wait_until(pilot, lambda: len(streamed(pane)) > len(text) // 4, "a quarter of the reply")
            await type_a_key(pilot, pane)
            assert mounted(pane) < MOUNTED_BOUND
            await wait_replied(pilot, pane)
            assert pane.conversation.messages[-1].content == text
            assert mounted(pane) < MOUNTED_BOUND
            assert list(pane.transcript.query(PlainSegment)), "the part too big for Markdown is shown as text"
            assert rss() - start < RSS_GROWTH_BOUND

        app = LfmChatApp(options)
        async with app.run_test(size=(100, 40)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await wait_until(pilot, lambda: pane.transcript.replies, "the restored reply")
            await type_a_key(pilot, pane)
            restored = pane.conversation.messages[-1].content  # the store keeps the first 512 K characters
            assert (
                text.startswith(restored[:400_000]) and pane.transcript.replies[0].answer == restored.strip()
            )
            assert mounted(pane) < MOUNTED_BOUND


class TranscriptHost(App[None]):
    CSS_PATH = Path(__file__).parents[2] / "app" / "lfm_chat.tcss"

    def __init__(self, messages: list[ChatMessage]) -> None:
        super().__init__()
        self.transcript = Transcript(messages)

    def compose(self) -> ComposeResult:
        yield self.transcript


async def test_a_restored_transcript_draws_markdown_only_for_the_replies_near_the_view() -> None:
    answer = "".join(f"## Part {n}\n\nSome *text* with `code`.\n\n- one\n- two\n\n" for n in range(40))
    messages = [
        ChatMessage(role, f"question {n}" if role == "user" else answer)
        for n in range(30)
        for role in ("user", "assistant")
    ]
    app = TranscriptHost(messages)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        replies = app.transcript.replies
        assert [r.folded for r in replies[-SHOWN_REPLIES:]] == [False] * SHOWN_REPLIES
        assert sum(r.folded for r in replies) >= len(replies) - SHOWN_REPLIES - 1
        assert not list(replies[0].query(MarkdownSegment))  # folded: plain text, no Markdown blocks
        app.transcript.jump(to_end=False)  # scroll to the top: the first replies are drawn
        await wait_until(pilot, lambda: not replies[0].folded, "the first reply drawn")  # type: ignore[arg-type]
        assert list(replies[0].query(MarkdownSegment)) and replies[0].answer == answer.strip()
        assert replies[len(replies) // 2].folded  # the middle, far from the view, still is not
