"""Helpers for app tests: the test engine config, and waiting on the app by condition instead of sleeps.

A wait also stops as soon as the app can no longer get there (it exited, crashed, or shows the
error screen), with the reason in the failure: a broken start is a fast, readable failure, not
a two-minute timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual import events
from textual.app import App
from textual.pilot import Pilot

from app.core.conversation import ChatSettings
from app.core.options import AppOptions
from app.ui.screens.chat import ChatScreen
from app.ui.screens.error import ErrorScreen
from app.ui.widgets.chat_pane import ChatPane
from engine import RequestOutput

MakeOptions = Callable[..., AppOptions]
Reference = Callable[[list[dict[str, str]], ChatSettings], RequestOutput]

# Small and single-threaded: several test processes share two cores.
ENGINE = {
    "dtype": "float32",
    "num_kv_blocks": 512,
    "block_size": 16,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 128,
    "num_threads": 1,
}
GREEDY = ChatSettings(temperature=0.0, max_tokens=24)

LIMIT = 120.0  # seconds; only a hang reaches it (the machine is shared and slow)

DeadEnd = Callable[[App], str | None]


def exited(app: App) -> str | None:
    """Why waiting on ``app`` is pointless: it exited or crashed (Textual sets a return code for both)."""
    if app.return_code is not None:
        return f"the app exited with return code {app.return_code}"
    return None


def exited_or_failed(app: App) -> str | None:
    """`exited`, or lfm-chat gave up starting and shows why (nothing else can come after that)."""
    stack = app.screen_stack
    if stack and isinstance(stack[-1], ErrorScreen):
        return f"the app shows its error screen: {stack[-1].reason}"
    return exited(app)


def notices(app: App) -> str:
    """Every notification the app shows now, joined (Textual posts them: wait for one, never assume it)."""
    return " ".join(str(n.message) for n in app._notifications)


async def wait_until(
    pilot: Pilot,
    predicate: Callable[[], object],
    what: str = "",
    limit: float = LIMIT,
    dead_end: DeadEnd = exited_or_failed,
) -> None:
    """Poll until ``predicate()`` holds; fail at once in a ``dead_end`` state, or after ``limit`` s."""
    deadline = time.monotonic() + limit
    while not predicate():
        why = dead_end(pilot.app)
        if why is not None:
            raise AssertionError(f"gave up waiting for {what or predicate}: {why}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what or predicate} after {limit:.0f} s")
        await pilot.pause(0.02)


async def chat_screen(app: App, pilot: Pilot) -> ChatScreen:
    """The chat screen, once the engine has loaded and the screen is mounted."""
    await wait_until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.is_mounted, "a chat")
    assert isinstance(app.screen, ChatScreen)
    return app.screen


async def error_screen(app: App, pilot: Pilot) -> ErrorScreen:
    """The error screen lfm-chat shows when it cannot start, once mounted."""
    await wait_until(
        pilot,
        lambda: isinstance(app.screen, ErrorScreen) and app.screen.is_mounted,
        "an error",
        dead_end=exited,
    )
    assert isinstance(app.screen, ErrorScreen)
    return app.screen


async def submit(pilot: Pilot, pane: ChatPane, text: str) -> None:
    """Focus the pane's input, type `text` and press Enter there.

    The Enter key event goes to the input directly: `pilot.press` waits for the whole process
    to go idle, which while other panes stream means until every stream has ended.
    """
    pane.focus_input()
    await wait_until(pilot, lambda: pane.app.focused is pane.prompt_input, "focus")
    pane.prompt_input.text = text
    pane.prompt_input.post_message(events.Key("enter", "\r"))
    await wait_until(pilot, lambda: not pane.prompt_input.text, "the pane to take the message")


def streamed(pane: ChatPane) -> str:
    """The text the pane's turn in flight has received so far ("" when no turn is in flight)."""
    turn = pane.session.turn
    return "" if turn is None else turn.text


def replied(pane: ChatPane, turns: int = 1) -> bool:
    """The pane is idle with `turns` replies in its conversation."""
    messages = pane.conversation.messages
    return not pane.busy and sum(m.role == "assistant" for m in messages) >= turns


async def wait_replied(pilot: Pilot, *panes: ChatPane, turns: int = 1) -> None:
    await wait_until(pilot, lambda: all(replied(p, turns) for p in panes), f"{turns} replies")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]
