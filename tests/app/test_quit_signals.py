"""SIGTERM and SIGHUP quit as ctrl+q does: every pane saved, then Textual's driver stops, which
restores the terminal (alternate screen and mouse reporting off). Python's default for both ended
the process on the spot, the terminal left in the alternate screen with mouse reporting on."""

from __future__ import annotations

import os
import signal

import pytest

from app.app import LfmChatApp
from app.store.database import Store
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_until


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGHUP])
async def test_a_quit_signal_saves_and_leaves_cleanly(make_options: MakeOptions, signal_number: int) -> None:
    options = make_options(panes=1)
    app = LfmChatApp(options)
    async with app.run_test(size=(100, 30)) as pilot:
        pane = (await chat_screen(app, pilot)).panes[0]
        await submit(pilot, pane, "Hello!")
        await wait_until(pilot, lambda: not pane.busy, "the reply")
        pane.prompt_input.text = "a draft, never sent"
        os.kill(os.getpid(), signal_number)
        await wait_until(pilot, lambda: app.return_code is not None, "the app to quit")
    assert app.return_code == 0
    assert signal.getsignal(signal_number) == signal.SIG_DFL  # the handler left with the app
    store = Store(options.store_path)
    try:
        (conversation,) = store.open_conversations()
        assert conversation.messages[0].content == "Hello!" and conversation.draft == "a draft, never sent"
    finally:
        store.close()
