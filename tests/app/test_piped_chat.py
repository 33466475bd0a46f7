"""`cat notes.md | lfm-chat` without -p: the text waits in the first pane as an attachment and the
chat reads keys from the terminal; with no terminal, one sentence (never a TUI deaf to every key)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.app import LfmChatApp
from app.core.attachment import from_text
from cli import piped
from engine import DEFAULT_MODEL
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import MakeOptions, chat_screen, submit, wait_replied, wait_until


@pytest.fixture
def keys_fd() -> Iterator[int]:
    """A descriptor standing in for fd 0: a spent pipe's read end, as stdin is after `cat` ends."""
    read, write = os.pipe()
    os.close(write)
    yield read
    os.close(read)


def test_piped_text_is_taken_and_keys_then_come_from_the_terminal(
    keys_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader, follower = os.openpty()
    try:
        monkeypatch.setattr(piped, "TTY", os.ttyname(follower))
        assert not os.isatty(keys_fd)
        attachment = piped.take_piped_stdin(io.BytesIO(b"Buy milk.\n"), keys_fd)
        assert attachment is not None and attachment.name == "stdin" and attachment.text == "Buy milk.\n"
        assert os.isatty(keys_fd)
        assert piped.take_piped_stdin(io.BytesIO(b" \n"), keys_fd) is None  # nothing to attach
    finally:
        os.close(leader)
        os.close(follower)


def test_without_a_terminal_the_chat_refuses_in_one_sentence(
    keys_fd: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(piped, "TTY", str(tmp_path / "no-tty"))
    with pytest.raises(piped.NoTerminal, match='no terminal to read keys from: ask with -p "question"'):
        piped.take_piped_stdin(io.BytesIO(b"Buy milk.\n"), keys_fd)
    assert not os.isatty(keys_fd)


async def test_the_first_pane_holds_what_was_piped_for_the_first_message(make_options: MakeOptions) -> None:
    with FakeServer() as server:
        options = make_options(server=server.url, model=DEFAULT_MODEL, panes=2)
        options.piped = from_text("stdin", "Buy milk.\n")
        app = LfmChatApp(options)
        async with app.run_test(size=(160, 40)) as pilot:
            first, second = (await chat_screen(app, pilot)).panes
            await wait_until(pilot, lambda: first.session.attachments.held, "the piped text held")
            assert "+stdin" in str(first.border_subtitle) and not second.session.attachments.held
            await submit(pilot, first, "Summarise")
            await wait_replied(pilot, first)
            assert first.conversation.messages[0].content == "stdin\n```\nBuy milk.\n```\n\nSummarise"
