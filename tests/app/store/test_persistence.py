"""Conversations survive quitting: what was open comes back, a reply in flight is kept as far as it got."""

from __future__ import annotations

import sqlite3

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.store.database import Store
from app.ui.screens.history import HistoryScreen
from app.ui.screens.settings import SettingsScreen
from tests.app.pilot_helpers import MakeOptions, chat_screen, streamed, submit, wait_replied, wait_until


async def test_quit_and_relaunch_restores_open_conversations(make_options: MakeOptions) -> None:
    options = make_options(panes=2, chat=ChatSettings(temperature=0.0, max_tokens=2000))
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        first, streaming = (await chat_screen(app, pilot)).panes
        first.conversation.settings.max_tokens = 12
        first.focus_input()
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, SettingsScreen), "the settings modal")
        await pilot.press(*"Be brief.", "ctrl+s")
        await submit(pilot, first, "Hello!")
        await wait_replied(pilot, first)
        await submit(pilot, streaming, "Tell me a story about the sea.")
        await wait_until(pilot, lambda: streamed(streaming), "tokens")
        await pilot.press("ctrl+q")
    assert app.return_code == 0
    saved = [
        (p.conversation.settings, [(m.role, m.content) for m in p.conversation.messages])
        for p in (first, streaming)
    ]
    assert saved[0][0].system_prompt == "Be brief."
    assert [role for role, _ in saved[1][1]] == ["user", "assistant"]  # the partial reply was kept

    again = LfmChatApp(options)
    async with again.run_test(size=(120, 36)) as pilot:
        panes = (await chat_screen(again, pilot)).panes
        restored = [
            (p.conversation.settings, [(m.role, m.content) for m in p.conversation.messages]) for p in panes
        ]
        assert restored == saved
        replies = panes[1].transcript.replies
        await wait_until(pilot, lambda: [r.source for r in replies] == [saved[1][1][1][1]], "the transcript")


async def test_history_reopens_a_closed_conversation_in_a_new_pane(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[1]
        await submit(pilot, pane, "Remember me")
        await wait_replied(pilot, pane)
        messages = list(pane.conversation.messages)
        await pilot.press("alt+w")
        await wait_until(pilot, lambda: len(screen.panes) == 1, "the pane to close")
        assert app.store is not None and app.store.open_conversations() == []  # not reopened on relaunch

        await pilot.press("x")  # the pane left is not empty: the reopened conversation needs a new one
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history screen")
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the conversation to reopen")

        assert screen.panes[1].conversation.messages == messages
        assert app.focused is screen.panes[1].prompt_input
    store = Store(app.options.store_path)
    assert [s.title for s in store.summaries()] == ["Remember me"]
    store.close()


async def test_the_theme_is_remembered(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        await chat_screen(app, pilot)
        assert app.theme != "nord"
        app.theme = "nord"
        await pilot.press("ctrl+q")
    again = LfmChatApp(options)
    async with again.run_test(size=(120, 36)) as pilot:
        await chat_screen(again, pilot)
        assert again.theme == "nord"


async def test_history_search_rename_and_delete(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2, chat=ChatSettings(temperature=0.0, max_tokens=4)))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        first, second = screen.panes
        await submit(pilot, first, "about whales")
        await submit(pilot, second, "about trees")
        await wait_replied(pilot, first, second)
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "history")
        history = app.screen
        await pilot.press(*"whale")
        await wait_until(pilot, lambda: history.options.option_count == 1, "the search")  # type: ignore[attr-defined]
        await pilot.press("ctrl+r", *"Sea life", "enter")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "history to close")
        assert first.conversation.title == "Sea life"  # the open pane took the new name
        assert "Sea life" in str(first.border_title)

        first.focus_input()
        await pilot.press("alt+w")  # close pane 1, so its conversation can be deleted
        await wait_until(pilot, lambda: len(screen.panes) == 1, "the close")
        await pilot.press("ctrl+g")
        await wait_until(pilot, lambda: isinstance(app.screen, HistoryScreen), "history")
        history = app.screen
        await pilot.press(*"sea")
        await wait_until(pilot, lambda: history.options.option_count == 1, "the search")  # type: ignore[attr-defined]
        await pilot.press("delete")
        assert app.store is not None and len(app.store.summaries()) == 2  # one press only asks
        await pilot.press("delete")
        await wait_until(
            pilot, lambda: app.store is not None and len(app.store.summaries()) == 1, "the delete"
        )


async def test_panes_saved_by_retries_after_failed_saves_are_restored(make_options: MakeOptions) -> None:
    """The open-panes update names conversation rows that only the retried saves create: it must
    be written after them, or the pane comes back as a new chat and the chat is only in History."""
    options = make_options(panes=1, chat=ChatSettings(temperature=0.0, max_tokens=6))
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        pane = screen.panes[0]
        other = sqlite3.connect(options.store_path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # every write fails meanwhile, as on a full disk
        await submit(pilot, pane, "Remember this pane")
        await wait_replied(pilot, pane)
        assert screen.save_warning.display
        other.execute("ROLLBACK")
        other.close()
        screen._retry_saves()
        assert not screen.save_warning.display
        messages = list(pane.conversation.messages)
        await pilot.press("ctrl+q")

    again = LfmChatApp(options)
    async with again.run_test(size=(120, 36)) as pilot:
        [restored] = (await chat_screen(again, pilot)).panes
        assert restored.conversation.messages == messages
