"""Keystrokes land in the pane the user is in, however busy the others are.

A fast typist's loop (message, Enter, Tab) runs while earlier panes stream long replies from
the real engine. The keys are posted the way the terminal driver posts them, without waiting
for the app to go idle: that wait is exactly what a busy app does not give a typist.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from textual import events
from textual.pilot import Pilot

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui import frame_pacer
from bench.key_latency import FrameClock, type_from_thread
from engine import EngineConfig, TokenEvent
from tests.app.pilot_helpers import ENGINE, MakeOptions, chat_screen, wait_replied, wait_until

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
                await wait_until(
                    pilot,
                    lambda: first.session.turn is not None and first.session.turn.ids,
                    "pane 1 streaming",
                )
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


async def test_keys_reach_the_screen_before_any_stream_redraws_while_five_panes_stream(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Typing has the UI first: while keys arrive, streaming panes hold their frames (each redraw
    of a growing reply lays the whole screen out again), and catch up, losing nothing, after."""
    monkeypatch.setattr(
        frame_pacer, "TYPING_HOLD_SECONDS", 5.0
    )  # the test's burst is one burst, however slow
    monkeypatch.setattr(frame_pacer, "MAX_HOLD_SECONDS", 60.0)
    engine = EngineConfig(**{**ENGINE, "max_num_seqs": 5})
    app = LfmChatApp(make_options(panes=6, engine=engine, chat=ChatSettings(temperature=0.0, max_tokens=600)))
    async with app.run_test(size=(150, 60)) as pilot:
        screen = await chat_screen(app, pilot)
        *streaming, typing = screen.panes
        draws: list[float] = []
        for pane in streaming:
            pane.session.apply = recorded(pane.session.apply, draws)  # type: ignore[method-assign]
            await pane.session.send("Tell me a long story.")
        await wait_until(
            pilot,
            lambda: all(p.session.turn is not None and p.session.turn.ids for p in streaming),
            "5 streams",
        )
        typing.focus_input()
        await wait_until(pilot, lambda: app.focused is typing.prompt_input, "focus on pane 6")
        clock = FrameClock(app, lambda: len(typing.prompt_input.text))
        sent = type_from_thread(app, "twenty keys, typed..", 0.03)
        await wait_until(pilot, lambda: len(sent) == 20 and clock.first_showing(20, sent[-1]) is not None)
        assert all(p.session.turn is not None for p in streaming), "the replies ended before the typing did"
        first, last = clock.first_showing(1, sent[0]), clock.first_showing(20, sent[-1])
        assert first is not None and last is not None
        assert [t for t in draws if first <= t <= last] == []
        await wait_replied(pilot, *streaming)
        assert all(p.conversation.last_reply == p.transcript.replies[-1].source for p in streaming)
        assert typing.prompt_input.text == "twenty keys, typed.."


def recorded(apply: Callable[[list[TokenEvent]], Awaitable[None]], draws: list[float]):  # type: ignore[no-untyped-def]
    """A pane's `apply`, noting when it drew events."""

    async def run(events: list[TokenEvent]) -> None:
        if events:
            draws.append(time.perf_counter())
        await apply(events)

    return run
