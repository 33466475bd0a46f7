"""SVG snapshots of the main layout and the settings modal.

Deterministic by construction: the conversation comes from the store with fixed text, the
engine stays idle (no timing on screen), the cursor does not blink, the terminal size is fixed.
Update after an intended change with `pytest tests/app/test_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from app.app import LfmChatApp
from app.conversation import ChatMessage, ChatSettings, Conversation
from app.options import AppOptions
from app.screens.settings import SettingsScreen
from app.store import Store
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
SIZE = (110, 32)


def app_with_saved_chat(make_options: MakeOptions) -> LfmChatApp:
    """Demo mode (a fixed model label) with one conversation open from the store, one empty pane."""
    options: AppOptions = make_options(demo=True, panes=2)
    store = Store(options.store_path)
    chat = Conversation(
        [
            ChatMessage("user", "Write a greeting function in Python.", 0.0),
            ChatMessage("assistant", REPLY, 0.0),
        ],
        ChatSettings(system_prompt="You are concise."),
        created_at=0.0,
        updated_at=0.0,
    )
    store.save(chat)
    store.set_open([chat.id])  # type: ignore[list-item]
    store.close()
    return LfmChatApp(options)


def steady(then: Callable[[Pilot], object] | None = None) -> Callable[[Pilot], object]:
    """run_before: wait for the chat screen, optionally act, then stop every cursor blinking."""

    async def run(pilot: Pilot) -> None:
        app = pilot.app
        screen = await chat_screen(app, pilot)  # type: ignore[arg-type]
        await wait_until(pilot, lambda: screen.panes[0].transcript.replies[0].source == REPLY, "the reply")
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
