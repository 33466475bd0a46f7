"""The TUI with --server: the same panes, status lines and dashboard, fed over real HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.app import LfmChatApp
from app.core.options import AppOptions
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.dashboard import Dashboard
from app.ui.widgets.reply import AnswerMarkdown, Reply, ThinkingBlock
from engine import DEFAULT_MODEL
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, submit, wait_replied, wait_until

MakeOptions = Callable[..., AppOptions]


async def test_two_panes_stream_from_a_server_and_the_dashboard_reads_its_metrics(
    make_options: MakeOptions,
) -> None:
    with FakeServer() as server:
        server.delay = 0.3
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=2))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            first, second = screen.panes
            await submit(pilot, first, "Hi")
            await submit(pilot, second, "Hello")
            dashboard = screen.query_one(Dashboard)
            await wait_until(pilot, lambda: dashboard.peak_running >= 2, "two streams at once")
            await wait_replied(pilot, first, second)
            await wait_until(
                pilot, lambda: "vLLM metrics" in str(dashboard.meters.render()), "server metrics"
            )
            for pane in (first, second):
                assert pane.conversation.messages[-1].content == "Hello from the server."
                status = pane.status.describe()
                assert "11+5 tok" in status and "ttft" in status
                assert str(pane.border_subtitle).startswith("ctx 16/4096")
            assert "fake" in screen.title_text and server.url in screen.title_text


async def test_a_dropped_connection_keeps_the_partial_reply_and_says_so(make_options: MakeOptions) -> None:
    with FakeServer() as server:
        server.drop_after = 2
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test() as pilot:
            screen = await chat_screen(app, pilot)
            pane = screen.panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
            notices: list[Any] = list(pane.transcript.query(".notice"))
            assert pane.conversation.messages[-1].content == "Hello from"
            assert any("incomplete" in str(n.render()) for n in notices)
            assert pane.status.state == "error"


async def test_an_unreachable_server_is_an_error_screen_that_says_what_to_check(
    make_options: MakeOptions,
) -> None:
    with FakeServer() as server:
        url = server.url
    app = LfmChatApp(make_options(server=url, model=DEFAULT_MODEL))
    async with app.run_test() as pilot:
        from tests.app.pilot_helpers import error_screen

        screen = await error_screen(app, pilot)
        text = " ".join(str(w.render()) for w in screen.query("Static, Label"))
        assert "Cannot reach the server" in text and "Traceback" not in text


async def test_a_reply_is_kept_and_the_pane_stays_busy_until_its_transcript_is_settled(
    make_options: MakeOptions, monkeypatch: Any
) -> None:
    """A message sent the instant a reply ends must land below it: the reply is in the conversation
    before the pane's first await, and the pane refuses a new message until the drawing is done."""
    seen: list[tuple[bool, str, str]] = []
    finish = Reply.finish

    async def observed_finish(reply: Reply) -> None:
        pane = reply.query_ancestor(ChatPane)
        seen.append((pane.busy, pane.conversation.messages[-1].role, pane.status.state))
        await finish(reply)

    monkeypatch.setattr(Reply, "finish", observed_finish)
    with FakeServer() as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test() as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
    assert seen == [(True, "assistant", "idle")]


async def test_a_servers_reasoning_deltas_fold_as_thinking(make_options: MakeOptions) -> None:
    with FakeServer() as server:
        server.thinking = ["Plan", " it"]
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(100, 30)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
            assert pane.conversation.messages[-1].content == "<think>Plan it</think>Hello from the server."
            reply = pane.transcript.replies[-1]
            thinking, answer = reply.query_one(ThinkingBlock), reply.query_one(AnswerMarkdown)
            assert answer.source == "Hello from the server."
            assert not thinking.body.display  # folded once the answer started
            assert str(thinking.header.render()).startswith("▸ Thought · 2 words")
