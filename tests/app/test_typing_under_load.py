"""Keystrokes land in the pane the user is in, however busy the others are.

A fast typist's loop (message, Enter, Tab) runs while earlier panes stream long replies from
the real engine. The keys are posted the way the terminal driver posts them, without waiting
for the app to go idle: that wait is exactly what a busy app does not give a typist.
"""

from __future__ import annotations

import pytest
from textual import events
from textual.pilot import Pilot

from app.app import LfmChatApp
from app.conversation import ChatSettings
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_replied, wait_until

LONG = ChatSettings(temperature=0.0, max_tokens=160)


async def type_keys(pilot: Pilot, text: str, pause: float) -> None:
    for char in text:
        pilot.app.post_message(events.Key(char, char))
    await pilot.pause(pause)


@pytest.mark.parametrize("panes", [4, 9])
async def test_every_message_lands_in_its_pane_while_the_others_stream(
    make_options: MakeOptions, panes: int
) -> None:
    app = LfmChatApp(make_options(panes=panes, chat=LONG))
    async with app.run_test(size=(150, 60)) as pilot:
        screen = await chat_screen(app, pilot)
        first = screen.panes[0]
        await wait_until(pilot, lambda: app.focused is first.prompt_input, "focus in pane 1")
        for number in range(1, panes + 1):  # one burst: the keys queue up as a fast typist's would
            await type_keys(pilot, f"hi {number}", 0.0)
            app.post_message(events.Key("enter", "\r"))
            app.post_message(events.Key("tab", "\t"))
            if number == 1:
                await wait_until(pilot, lambda: first.turn is not None and first.turn.ids, "pane 1 streaming")
        await wait_replied(pilot, *screen.panes)

        sent = [[m.content for m in p.conversation.messages if m.role == "user"] for p in screen.panes]
        assert sent == [[f"hi {n}"] for n in range(1, panes + 1)]
        assert [p.prompt_input.text for p in screen.panes] == [""] * panes
        assert app.focused is first.prompt_input  # the last Tab wrapped around
        assert screen.dashboard.peak_running > 1  # the replies really overlapped


async def test_keys_typed_right_after_enter_stay_for_the_next_message(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2, chat=LONG))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        await wait_until(pilot, lambda: app.focused is pane.prompt_input, "focus")
        await type_keys(pilot, "first", 0.0)
        app.post_message(events.Key("enter", "\r"))
        await type_keys(pilot, "second", 0.0)
        await wait_until(pilot, lambda: pane.busy, "the first turn to start")
        await wait_until(pilot, lambda: pane.prompt_input.text == "second", "the type-ahead")
        await wait_replied(pilot, pane)
        assert [m.content for m in pane.conversation.messages if m.role == "user"] == ["first"]
        assert pane.prompt_input.text == "second"

        # Enter while the reply streams is refused with the text kept, then ↑ recalls history.
        app.post_message(events.Key("enter", "\r"))
        await wait_until(pilot, lambda: pane.busy, "the second turn")
        await type_keys(pilot, "third", 0.05)
        app.post_message(events.Key("enter", "\r"))
        await pilot.pause(0.05)
        assert pane.prompt_input.text == "third"
        await wait_replied(pilot, pane, turns=2)
        pane.prompt_input.text = ""
        await pilot.press("up")
        assert pane.prompt_input.text == "second"
        await pilot.press("up")
        assert pane.prompt_input.text == "first"
        await pilot.press("down", "down")
        assert pane.prompt_input.text == ""
