"""The input box's editing keys behave as in a shell and do nothing else (issue 39, item 1): the
app's actions that sat on them moved, and nothing one keypress does loses a draft."""

from __future__ import annotations

from textual.pilot import Pilot

from app.app import LfmChatApp
from app.store.database import Store
from app.ui.screens.chat import ChatScreen
from app.ui.widgets.prompt_input import PromptInput
from tests.app.pilot_helpers import MakeOptions, chat_screen, notices, wait_until
from tests.app.ui.test_typed_keys_and_panes import chat, seed


def contents(screen: ChatScreen) -> list[list[str]]:
    return [[m.content for m in pane.conversation.messages] for pane in screen.panes]


async def launch_with_a_chat(make_options: MakeOptions) -> LfmChatApp:
    options = make_options(panes=2)
    options.data_dir.mkdir(parents=True)
    seed(Store(options.store_path), chat("First question"), chat("Other pane"))
    return LfmChatApp(options)


async def press_each(pilot: Pilot, prompt: PromptInput, steps: list[tuple[tuple[str, ...], str]]) -> None:
    """Press each step's keys in turn and wait until the box holds that step's text."""
    for keys, expected in steps:
        await pilot.press(*keys)
        await wait_until(pilot, lambda e=expected: prompt.text == e, f"{keys} to leave {expected!r}")


async def test_line_editing_keys_edit_the_box_and_nothing_else(make_options: MakeOptions) -> None:
    app = await launch_with_a_chat(make_options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await wait_until(
            pilot, lambda: contents(screen)[0] == ["First question", "Hi, plainly."], "the chats"
        )
        before = contents(screen)
        prompt = screen.panes[0].prompt_input
        prompt.focus()
        prompt.restore("one two three")
        steps = [
            (("ctrl+a", "x"), "xone two three"),  # line start
            (("ctrl+e", "y"), "xone two threey"),  # line end
            (("ctrl+w",), "xone two "),  # word back deleted
            (("ctrl+y",), "xone two threey"),  # and put back
            (("alt+b", "alt+b", "ctrl+k"), "xone "),  # two words back, delete to the end
            (("ctrl+y", "ctrl+b", "ctrl+d"), "xone two three"),  # yank, char back, delete char
            (("ctrl+a", "alt+f", "alt+d"), "xone three"),  # word forward, delete word forward
            (("ctrl+f", "ctrl+u"), "three"),  # char forward, delete to line start
            (("ctrl+z",), "xone three"),  # undo
        ]
        for keys, expected in steps:
            await pilot.press(*keys)
            await wait_until(pilot, lambda e=expected: prompt.text == e, f"{keys} to leave {expected!r}")
        assert len(screen.panes) == 2
        assert contents(screen) == before
        assert app.focused is prompt


async def test_line_keys_take_the_whole_line_however_many_rows_it_wraps_to(make_options: MakeOptions) -> None:
    """A shell's ctrl+a/e/u/k act on the line typed; TextArea's stop at the edge of a wrapped row,
    which put text typed after ctrl+a in the middle of a long message."""
    app = await launch_with_a_chat(make_options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        prompt = screen.panes[0].prompt_input
        prompt.focus()
        line = " ".join(f"word{i}" for i in range(40))  # ~270 characters: five rows of a half-width pane
        prompt.restore(f"first line\n{line}")
        await wait_until(pilot, lambda: prompt.wrapped_document.height >= 5, "the line to wrap")
        steps = [
            (("ctrl+a", "x"), f"first line\nx{line}"),
            (("ctrl+e", "y"), f"first line\nx{line}y"),
            (("ctrl+u",), "first line\n"),  # the whole line, not its last row
            (("ctrl+y", "ctrl+a", "ctrl+k"), "first line\n"),
            (("ctrl+u",), "first line"),  # at a line's start: the break before it
            (("ctrl+a", "ctrl+k"), ""),
            (("ctrl+y", "home", "z"), "zfirst line"),  # home is TextArea's own
        ]
        await press_each(pilot, prompt, steps)


async def test_what_super_backspace_deletes_comes_back_with_ctrl_y(make_options: MakeOptions) -> None:
    """TextArea's own delete-to-row-start (super+backspace) kills into the same ring as the shell keys."""
    app = await launch_with_a_chat(make_options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        prompt = screen.panes[0].prompt_input
        prompt.focus()
        prompt.restore("keep this")
        await press_each(pilot, prompt, [(("super+backspace",), ""), (("ctrl+y",), "keep this")])


async def test_the_moved_actions_run_on_their_new_keys(make_options: MakeOptions) -> None:
    app = await launch_with_a_chat(make_options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await wait_until(
            pilot, lambda: contents(screen)[0] == ["First question", "Hi, plainly."], "the chats"
        )
        screen.panes[0].prompt_input.focus()
        await pilot.press("alt+n")
        await wait_until(pilot, lambda: len(screen.panes) == 3, "alt+n to open a pane")
        await pilot.press("alt+w")
        await wait_until(pilot, lambda: len(screen.panes) == 2, "alt+w to close the empty pane")
        await pilot.press("f9")
        assert not screen.dashboard_wanted
        first = screen.panes[0]
        first.prompt_input.focus()
        await pilot.press("alt+e")
        await wait_until(pilot, lambda: first.prompt_input.text == "First question", "alt+e to edit")
        second = screen.panes[1]
        second.prompt_input.focus()
        await pilot.press("alt+l")
        await wait_until(pilot, lambda: second.conversation.messages == [], "alt+l to clear")


async def test_a_draft_survives_closing_and_editing_over_it(make_options: MakeOptions) -> None:
    app = await launch_with_a_chat(make_options)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await chat_screen(app, pilot)
        await wait_until(
            pilot, lambda: contents(screen)[0] == ["First question", "Hi, plainly."], "the chats"
        )
        first = screen.panes[0]
        first.prompt_input.focus()
        await pilot.press(*"draft")
        await pilot.press("alt+w")
        await wait_until(pilot, lambda: "has a message not sent" in notices(app), "the close to ask first")
        assert len(screen.panes) == 2
        assert first.prompt_input.text == "draft"

        await pilot.press("alt+e")
        await wait_until(pilot, lambda: first.prompt_input.text == "First question", "the edit")
        await pilot.press("ctrl+z")
        await wait_until(pilot, lambda: first.prompt_input.text == "draft", "undo to give the draft back")

        await pilot.press("alt+w", "alt+w")
        await wait_until(pilot, lambda: len(screen.panes) == 1, "a second press to close it")
