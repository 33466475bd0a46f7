"""Frictions a daily user hit: keys typed in one burst, drafts, History and panes, small notices.

A burst is fed the way a terminal delivers it: one read through the app's input parser, every
key posted at once, as the driver thread does.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.command import CommandInput
from textual.pilot import Pilot
from textual.widgets import Input, Label

from app.app import LfmChatApp
from app.core.conversation import ChatMessage, Conversation
from app.store.database import Store
from app.ui.paste import PasteSafeParser
from app.ui.screens.history import HistoryScreen
from app.ui.screens.settings import SettingsScreen
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices, wait_until

HAIKU = "zzzz\x7f\x7f\x7f\x7fhaiku"  # zzzz, four Backspaces, haiku


def burst(app: LfmChatApp, data: str) -> None:
    for event in PasteSafeParser().feed(data):
        app.post_message(event)


def seed(store: Store, *conversations: Conversation, open_: bool = True) -> list[int]:
    """Save `conversations` (open in panes at launch unless `open_` is False) and close the store."""
    ids = [store.save(c) for c in conversations]
    if open_:
        store.set_open(ids)
    store.close()
    return ids


def chat(text: str = "Hello there") -> Conversation:
    return Conversation(messages=[ChatMessage("user", text), ChatMessage("assistant", "Hi, plainly.")])


async def settled(pilot: Pilot, value: Callable[[], str], expected: str, what: str) -> None:
    await wait_until(pilot, lambda: value() == expected, f"{what} to read {expected!r}")


async def test_a_burst_of_keys_keeps_its_order_everywhere(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        prompt = (await chat_screen(app, pilot)).panes[0].prompt_input
        burst(app, "gh\x7fij")
        await settled(pilot, lambda: prompt.text, "gij", "the prompt")

        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: app.screen.query(CommandInput), "the palette")
        palette = app.screen.query_one(CommandInput)
        burst(app, HAIKU)
        await settled(pilot, lambda: palette.value, "haiku", "the palette search")
        await pilot.press("escape")

        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "History")
        search = app.screen.query_one("#history-search", Input)
        burst(app, HAIKU)
        await settled(pilot, lambda: search.value, "haiku", "the History search")


async def test_the_settings_error_quotes_what_was_typed(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        await chat_screen(app, pilot)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings")
        field = app.screen.query_one("#temperature", Input)
        field.value = ""
        field.focus()
        await pilot.pause()
        burst(app, "xyz\x13")  # typed, then ctrl+s at once
        error = app.screen.query_one("#settings-error", Label)
        await wait_until(pilot, lambda: str(error.render()), "the error")
        assert "not 'xyz'" in str(error.render())


async def test_ctrl_t_without_thinking_says_so(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    seed(Store(options.store_path), chat())
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await wait_until(pilot, lambda: pane.transcript.replies, "the reply")
        await pilot.press("alt+t")
        await wait_until(pilot, lambda: "No thinking to show" in notices(app), "a notice")


async def test_a_restored_draft_has_the_cursor_at_its_end(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    seed(Store(options.store_path), Conversation(draft="half a\nthought"))
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        prompt = (await chat_screen(app, pilot)).panes[0].prompt_input
        await wait_until(pilot, lambda: prompt.text == "half a\nthought", "the draft")
        assert prompt.cursor_location == prompt.document.end
        await pilot.press("s")
        assert prompt.text == "half a\nthoughts"


async def test_history_reopens_into_an_empty_pane(make_options: MakeOptions) -> None:
    options = make_options(panes=2)
    options.data_dir.mkdir(parents=True)
    [saved] = seed(Store(options.store_path), chat("Reopen me"), open_=False)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        screen.panes[1].prompt_input.focus()
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "History")
        await pilot.press("enter")
        second = screen.panes[1]
        await wait_until(pilot, lambda: second.conversation.id == saved, "the focused empty pane to take it")
        assert len(screen.panes) == 2
        assert [m.content for m in second.conversation.messages] == ["Reopen me", "Hi, plainly."]
        assert app.focused is second.prompt_input


async def test_deleting_a_conversation_open_in_a_pane_is_offered(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    [saved] = seed(Store(options.store_path), chat("Delete me"))
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "History")
        await pilot.press("delete")
        await wait_until(pilot, lambda: "open in a pane" in notices(app), "the offer")
        await pilot.press("delete")
        assert app.store is not None
        await wait_until(pilot, lambda: app.store.load(saved) is None, "the row to go")  # type: ignore[union-attr]
        assert pane.conversation.messages == [] and pane.conversation.id != saved
        await pilot.press("escape")
        await pilot.pause(0.5)
        assert app.store.load(saved) is None  # not written back by the pane
        assert not pane.transcript.replies
