"""SVG snapshots of the main layout and the settings modal.

Deterministic by construction: the conversation comes from the store with fixed text, the
engine stays idle (no timing on screen), the cursor does not blink, the terminal size is fixed.
Update after an intended change with `pytest tests/app/ui/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from app.app import LfmChatApp
from app.core.conversation import ChatMessage, ChatSettings, Conversation
from app.core.options import AppOptions
from app.store.database import Store
from app.ui.screens.settings import SettingsScreen
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_until

REPLY = """\
Here is a small function:

```python
def greet(name: str) -> str:
    return f"Hello, {name}!"
```

- it takes a **name**
- it returns a greeting
"""
THINKING_REPLY = (
    "<think>The user wants the weather in Paris. I have a weather tool, so I should call it "
    "rather than guess.</think>Let me look that up."
    '<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>'
)
SIZE = (110, 32)


def app_with_saved_chat(
    make_options: MakeOptions,
    panes: int = 2,
    turn: tuple[str, str] = ("Write a greeting function in Python.", REPLY),
) -> LfmChatApp:
    """Demo mode (a fixed model label) with one conversation open from the store, the rest empty."""
    options: AppOptions = make_options(demo=True, panes=panes)
    store = Store(options.store_path)
    chat = Conversation(
        [ChatMessage("user", turn[0], 0.0), ChatMessage("assistant", turn[1], 0.0)],
        ChatSettings(system_prompt="You are concise.", preset="LFM2 card defaults"),
        created_at=0.0,
        updated_at=0.0,
    )
    store.save(chat)
    store.set_open([chat.id])  # type: ignore[list-item]
    store.close()
    return LfmChatApp(options)


def steady(then: Callable[[Pilot], object] | None = None, reply: str = REPLY) -> Callable[[Pilot], object]:
    """run_before: wait for the chat screen, optionally act, then stop every cursor blinking."""

    async def run(pilot: Pilot) -> None:
        app = pilot.app
        screen = await chat_screen(app, pilot)  # type: ignore[arg-type]
        await wait_until(pilot, lambda: screen.panes[0].transcript.replies[0].source == reply, "the reply")
        if then is not None:
            await then(pilot)  # type: ignore[misc]
        for widget in app.screen.query(TextArea):
            widget.cursor_blink = False
        for widget in app.screen.query(Input):
            widget.cursor_blink = False
        await pilot.pause()

    return run


def test_main_layout(snap_compare: Callable[..., bool], make_options: MakeOptions) -> None:
    assert snap_compare(app_with_saved_chat(make_options), terminal_size=SIZE, run_before=steady())


def test_settings_modal(snap_compare: Callable[..., bool], make_options: MakeOptions) -> None:
    async def open_settings(pilot: Pilot) -> None:
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen), "the modal")
        await wait_until(pilot, lambda: pilot.app.screen.is_mounted, "the modal")

    assert snap_compare(
        app_with_saved_chat(make_options), terminal_size=SIZE, run_before=steady(open_settings)
    )


def test_thinking_folds_and_a_tool_call_is_labelled(
    snap_compare: Callable[..., bool], make_options: MakeOptions
) -> None:
    app = app_with_saved_chat(make_options, panes=1, turn=("What's the weather in Paris?", THINKING_REPLY))
    assert snap_compare(app, terminal_size=(80, 24), run_before=steady(reply=THINKING_REPLY))


@pytest.mark.parametrize("size", [(60, 20), (45, 14)])
def test_four_panes_in_a_small_terminal(
    snap_compare: Callable[..., bool], make_options: MakeOptions, size: tuple[int, int]
) -> None:
    """The dashboard folds to a line (60×20) or steps aside (45×14); every pane keeps its input."""

    async def type_a_draft(pilot: Pilot) -> None:
        await pilot.press(*"typed")

    app = app_with_saved_chat(make_options, panes=4)
    assert snap_compare(app, terminal_size=size, run_before=steady(type_a_draft))


@pytest.mark.parametrize(("size", "rows"), [((80, 24), 5), ((60, 20), 2), ((45, 14), 2)])
async def test_four_panes_keep_their_input_and_transcript_rows(
    make_options: MakeOptions, size: tuple[int, int], rows: int
) -> None:
    app = app_with_saved_chat(make_options, panes=4)
    async with app.run_test(size=size) as pilot:
        screen = await chat_screen(app, pilot)  # type: ignore[arg-type]
        await pilot.pause()
        assert not screen.has_class("-too-small")
        for pane in screen.panes:
            assert pane.prompt_input.region.height >= 1
            assert pane.transcript.region.height >= rows
        await pilot.press(*"hello")
        assert screen.panes[0].prompt_input.text == "hello"
