"""Several panes stream from the one engine at once, each gets its own tokens, Esc stops one."""

from __future__ import annotations

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.core.sanitize import strip_control
from app.ui.widgets.dashboard import Dashboard
from tests.app.pilot_helpers import (
    MakeOptions,
    Reference,
    chat_screen,
    streamed,
    submit,
    user,
    wait_replied,
    wait_until,
)

PROMPTS = ["Tell me a story about the sea.", "def fibonacci(n: int) -> int:", "你好，世界。今天天气很好"]


async def test_three_panes_stream_concurrently_each_to_its_own_transcript(
    make_options: MakeOptions, reference: Reference
) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=320)
    outs = [reference(user(p), settings) for p in PROMPTS]
    wants = [strip_control(out.text) for out in outs]
    assert all(wants), "precondition: every reference reply has visible text"
    app = LfmChatApp(make_options(panes=3, chat=settings))
    async with app.run_test(size=(150, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        panes = screen.panes
        for pane, prompt in zip(panes, PROMPTS, strict=True):
            await submit(pilot, pane, prompt)
        await wait_replied(pilot, *panes)

        assert screen.query_one(Dashboard).peak_running >= 2
        for pane, want, out in zip(panes, wants, outs, strict=True):
            assert pane.transcript.replies[-1].source == want
            assert pane.conversation.messages[-1].content == want
            assert pane.status.state == ("cut" if out.finish_reason == "length" else "idle")


async def test_escape_stops_only_the_focused_pane(make_options: MakeOptions, reference: Reference) -> None:
    settings = ChatSettings(temperature=0.0, max_tokens=160)
    wants = [reference(user(p), settings) for p in PROMPTS]
    target = max(range(3), key=lambda i: len(wants[i].token_ids))
    assert len(wants[target].token_ids) >= 40, "precondition: a reply long enough to stop midway"
    app = LfmChatApp(make_options(panes=3, chat=settings))
    async with app.run_test(size=(150, 40)) as pilot:
        screen = await chat_screen(app, pilot)
        panes = screen.panes
        for pane, prompt in zip(panes, PROMPTS, strict=True):
            await submit(pilot, pane, prompt)
        stopped = panes[target]
        await wait_until(pilot, lambda: streamed(stopped), "first visible tokens")
        stopped.focus_input()
        await pilot.press("escape")
        await wait_replied(pilot, *panes)

        for index, (pane, want) in enumerate(zip(panes, wants, strict=True)):
            full = strip_control(want.text)
            reply = pane.conversation.messages[-1].content
            if index == target:
                assert pane.status.state == "stopped"
                assert full.startswith(reply) and len(reply) < len(full)
            else:
                assert pane.status.state == ("cut" if want.finish_reason == "length" else "idle")
                assert reply == full
