"""Pane management and discoverability: new/close/tab keys, and every action in the command palette."""

from __future__ import annotations

import json

from textual.binding import Binding
from textual.command import CommandList

from app.app import LfmChatApp
from app.ui.screens.chat import ChatScreen
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.key_footer import FooterKey, KeyFooter
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied, wait_until


async def test_new_close_and_tab_between_panes(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=2))
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await pilot.press("alt+n")
        await wait_until(pilot, lambda: len(screen.panes) == 3, "a third pane")
        third = screen.panes[2]
        assert app.focused is third.prompt_input
        assert [p.region.y for p in screen.panes] == [screen.panes[0].region.y] * 3  # side by side

        await pilot.press("tab")
        assert app.focused is screen.panes[0].prompt_input
        await pilot.press("shift+tab")
        assert app.focused is third.prompt_input

        await pilot.press("alt+w")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the pane to close")
        assert third not in screen.panes
        await pilot.press("f9")
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


def footer_labels(app: LfmChatApp) -> list[str]:
    """The footer's keys as drawn, left to right, each only if it is on screen whole."""
    footer = app.screen.query_one(KeyFooter)
    keys = sorted(footer.query(FooterKey), key=lambda k: k.region.x)
    right = footer.region.right
    return [f"{k.key_display} {k.description}" for k in keys if k.region.width and k.region.right <= right]


PINNED = ["^p All keys", "^q Quit"]


def laid_out(app: LfmChatApp, width: int) -> bool:
    """The footer chose its keys for `width` columns, and quit and the palette are in view."""
    return app.screen.query_one(KeyFooter).laid_out_width == width and footer_labels(app)[-2:] == PINNED


def fits(labels: list[str], width: int) -> bool:
    return sum(len(label) + 1 for label in labels) <= width


async def test_the_footer_keeps_quit_in_view_at_every_width(make_options: MakeOptions) -> None:
    app = LfmChatApp(make_options(panes=1))
    async with app.run_test(size=(220, 30)) as pilot:  # every key shown at full width ("alt+" is long)
        await chat_screen(app, pilot)
        await wait_until(pilot, lambda: laid_out(app, 220), "the footer laid out for 220 columns")
        wide = footer_labels(app)
        bindings = [b for b in [*ChatScreen.BINDINGS, *ChatPane.BINDINGS] if isinstance(b, Binding)]
        shown = {b.description for b in bindings if b.show}
        assert {"Next pane", "Edit", "Clear", "Dashboard", "Copy code", "Export"} <= shown
        assert shown <= {label.split(" ", 1)[1] for label in wide}
        assert wide[0] == "esc Stop"
        assert wide[-2:] == PINNED

        for width in (80, 60, 45):
            await pilot.resize_terminal(width, 20)
            await wait_until(pilot, lambda w=width: laid_out(app, w), f"the footer at {width} columns")
            narrow = footer_labels(app)
            assert fits(narrow, width)
            assert 2 < len(narrow) < len(wide)
            assert narrow[:-2] == wide[: len(narrow) - 2]  # the most needed keys stay


async def test_keys_are_remapped_by_binding_id_from_keymap_json(make_options: MakeOptions) -> None:
    options = make_options(panes=1)
    options.data_dir.mkdir(parents=True)
    options.keymap_path.write_text(json.dumps({"new_pane": "f2"}), encoding="utf-8")
    app = LfmChatApp(options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await pilot.press("alt+n")  # no longer bound
        await pilot.press("f2")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "the remapped key to open a pane")
        assert len(screen.panes) == 2


async def test_moving_to_another_pane_greys_the_footers_keys_in_place(make_options: MakeOptions) -> None:
    """The footer says which keys work in the focused pane, without composing itself again: a
    focus move changed the bindings twice, each a recompose of every key and a screen layout,
    which the first keys typed in the new pane waited behind while other panes streamed."""
    app = LfmChatApp(make_options(panes=2))
    async with app.run_test(size=(160, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        first, _second = screen.panes
        await submit(pilot, first, "Hello")
        await wait_replied(pilot, first)
        first.transcript.move_selection(-1)  # a selection, which Esc clears: Stop works in this pane

        def stop_key() -> FooterKey:
            return next(k for k in app.screen.query(FooterKey) if k.description == "Stop")

        first.focus_input()
        await wait_until(pilot, lambda: not stop_key().disabled, "Stop enabled in the first pane")
        await pilot.pause(0.1)
        keys = list(app.screen.query(FooterKey))
        await pilot.press("tab")
        await wait_until(pilot, lambda: stop_key().disabled, "Stop greyed in the second pane")
        await pilot.press("shift+tab")
        await wait_until(pilot, lambda: not stop_key().disabled, "Stop enabled again in the first")
        await pilot.pause(0.1)
        assert list(app.screen.query(FooterKey)) == keys  # the same keys, updated in place
