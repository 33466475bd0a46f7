"""Pane management and discoverability: new/close/tab keys, and every action in the command palette."""

from __future__ import annotations

import json

from textual.binding import Binding
from textual.command import CommandList

from app.app import LfmChatApp
from app.screens.chat import ChatScreen
from app.widgets.chat_pane import ChatPane
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_until


async def test_new_close_and_tab_between_panes(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: len(screen.panes) == 3, "a third pane")
        third = screen.panes[2]
        assert app.focused is third.prompt_input
        assert [p.region.y for p in screen.panes] == [screen.panes[0].region.y] * 3  # side by side

        await pilot.press("tab")
        assert app.focused is screen.panes[0].prompt_input
        await pilot.press("shift+tab")
        assert app.focused is third.prompt_input

        await pilot.press("ctrl+w")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the pane to close")
        assert third not in screen.panes
        await pilot.press("ctrl+d")
        assert not screen.dashboard.display


async def test_every_binding_is_a_palette_command_that_runs(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        titles = {command.title for command in app.get_system_commands(screen)}
        for binding in [*ChatScreen.BINDINGS, *ChatPane.BINDINGS]:
            assert isinstance(binding, Binding) and binding.id
            assert binding.tooltip in titles
        assert "Save everything and quit" in titles  # ours, in place of Textual's Quit
        assert not {"Quit", "Maximize"} & titles

        await pilot.press("ctrl+p")
        await pilot.press(*"Open a new pane")
        await wait_until(pilot, lambda: app.screen.query_one(CommandList).option_count > 0, "matches")
        assert "Open a new pane" in str(app.screen.query_one(CommandList).get_option_at_index(0).prompt)
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the palette to open a pane")


async def test_keys_are_remapped_by_binding_id_from_keymap_json(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    options.keymap_path.write_text(json.dumps({"new_pane": "ctrl+t"}), encoding="utf-8")
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await pilot.press("ctrl+n")  # no longer bound
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the remapped key to open a pane")
        assert len(screen.panes) == 2
