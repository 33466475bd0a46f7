"""The real TUI against a hostile OpenAI-compatible server, one named mode at a time (fake_openai.py).

Whatever a server sends, the app stays up, no control character reaches the screen, the pane
that met the mode ends its reply with a readable error and takes a new message, and a pane
streaming meanwhile from a well-behaved reply finishes it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from textual import events
from textual.app import App
from textual.pilot import Pilot

from app.app import LfmChatApp
from app.core.options import AppOptions
from app.ui.widgets.chat_pane import ChatPane
from engine import DEFAULT_MODEL
from tests.app.fake_openai import BAD_LINES, ERRORS, FakeServer
from tests.app.pilot_helpers import chat_screen, error_screen, submit, wait_replied, wait_until

MakeOptions = Callable[..., AppOptions]
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
SPARED = "a normal question"  # the server answers this one normally in every mode
LENIENT = ("content_null", "escape_finish_reason", "usage_wrong_shapes")  # shapes taken as they are
ENDING = sorted(
    [m for m in BAD_LINES if m not in LENIENT]
    + [*ERRORS, "huge_chunk", "endless_line", "huge_reply", "gzip_bomb"]
)
WAIT = 20.0


def screen_text(app: App) -> str:
    """Every cell the terminal would be sent for the current screen, toasts included."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


def assert_clean(app: App) -> None:
    text = screen_text(app)
    found = CONTROL.search(text.replace("\n", ""))
    assert found is None, f"{found.group()!r} reached the screen: {text!r}"
    assert "PWNED" not in text and "Traceback" not in text


async def press_enter_with(pilot: Pilot, pane: ChatPane, text: str) -> None:
    """`submit` without waiting for the input to empty: a refusal may give the text back at once."""
    pane.focus_input()
    await wait_until(pilot, lambda: pane.app.focused is pane.prompt_input, "focus")
    pane.prompt_input.text = text
    pane.prompt_input.post_message(events.Key("enter", "\r"))


def last_notice(pane: ChatPane) -> str:
    shown = list(pane.transcript.query(".notice"))
    return str(shown[-1].render()) if shown else ""


async def test_each_hostile_stream_ends_only_its_reply(make_options: MakeOptions) -> None:
    """One app for all modes (a start per mode would cost seconds each): the hostile pane meets
    each mode in turn while the other pane streams a normal reply."""
    with FakeServer() as server:
        server.spared = SPARED
        server.delay = 0.05
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=2))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            hostile, normal = screen.panes
            for turn, mode in enumerate(ENDING, start=1):
                server.mode = mode
                await submit(pilot, normal, SPARED)
                await hostile.action_clear()  # ctrl+l: each mode meets a fresh pane
                await press_enter_with(pilot, hostile, f"meet {mode}")
                await wait_until(
                    pilot,
                    lambda: not hostile.busy and hostile.status.state == "error",
                    f"{mode}: an error",
                    WAIT,
                )
                said = last_notice(hostile)
                assert "the server" in said or "the reply passed" in said, f"{mode}: {said}"
                await wait_replied(pilot, normal, turns=turn)
                assert normal.conversation.messages[-1].content == "Hello from the server.", mode
                assert_clean(app)
            server.mode = None
            await submit(pilot, hostile, SPARED)
            await wait_until(pilot, lambda: hostile.status.state == "idle", "a normal reply after all", WAIT)
            assert hostile.conversation.messages[-1].content == "Hello from the server."


@pytest.mark.parametrize("mode", LENIENT)
async def test_odd_but_harmless_shapes_give_the_whole_reply(make_options: MakeOptions, mode: str) -> None:
    with FakeServer(mode=mode) as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
            assert pane.conversation.messages[-1].content == "Hello from the server."
            assert_clean(app)


async def test_a_slow_drip_stops_at_once_on_escape(make_options: MakeOptions) -> None:
    with FakeServer(mode="slow_drip") as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            pane = (await chat_screen(app, pilot)).panes[0]
            await submit(pilot, pane, "Hi")
            await wait_until(pilot, lambda: server.sent >= 2, "a couple of bytes in")
            assert pane.busy
            started = time.monotonic()
            pane.action_stop()
            await wait_until(pilot, lambda: not pane.busy, "the drip to stop", 5.0)
            assert time.monotonic() - started < 5.0
            assert_clean(app)


@pytest.mark.parametrize(
    "mode",
    [
        "escape_models_error",
        "models_list",
        "models_string",
        "models_no_data",
        "model_ids_not_strings",
        "models_deep",
        "models_huge",
    ],
)
async def test_a_bad_model_listing_is_one_clear_sentence(make_options: MakeOptions, mode: str) -> None:
    with FakeServer(mode=mode) as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await error_screen(app, pilot)
            assert server.url in screen.reason and "Error:" not in screen.reason, screen.reason
            assert_clean(app)
            await pilot.press("q")
        assert app.return_code == 1 and not CONTROL.search(screen.reason)


async def test_escape_laden_model_ids_show_nothing_executable(make_options: MakeOptions) -> None:
    with FakeServer(mode="escape_model_ids") as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(200, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            assert "evil" in screen.title_text and "[bold red]markup[/]" in screen_text(app)
            assert not CONTROL.search(screen.title_text)
            assert_clean(app)
            pane = screen.panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
        refused = LfmChatApp(make_options(server=server.url, model="other"))
        async with refused.run_test(size=(200, 40)) as pilot:
            screen = await error_screen(refused, pilot)
            assert "does not serve other; it serves: evil" in screen.reason
            assert_clean(refused)


@pytest.mark.parametrize(
    "mode",
    ["context_abc", "context_1e400", "context_negative", "context_huge", "context_bool", "meta_not_object"],
)
async def test_a_context_length_that_is_no_number_is_unknown(make_options: MakeOptions, mode: str) -> None:
    with FakeServer(mode=mode) as server:
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=1))
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            assert screen.title_text.endswith("context ?")
            pane = screen.panes[0]
            await submit(pilot, pane, "Hi")
            await wait_replied(pilot, pane)
