"""`cat notes.md | lfm-chat` (without -p): the piped text waits in the first pane as an attachment
of the first message, and the chat reads its keys from the terminal instead of the spent pipe.

Without this the TUI read keys from the pipe: at its end every key was lost, ctrl+q included, and
the input loop spun at a full core. With no terminal to read keys from (cron, a CI job), the chat
cannot run: one sentence says to use -p.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from app.core.attachment import Attachment, read_stream

TTY = "/dev/tty"  # the controlling terminal, whatever stdin is
STDIN_NAME = "stdin"


class NoTerminal(Exception):
    """Keys cannot be read from anywhere: the chat cannot run."""


def take_piped_stdin(stdin: BinaryIO, keys_fd: int = 0) -> Attachment | None:
    """Read piped `stdin` (bounded) and put the terminal on `keys_fd` in its place; the attachment,
    or None when the pipe held no text. AttachmentError: not text, or too big; NoTerminal."""
    try:
        terminal = os.open(TTY, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        raise NoTerminal(
            'stdin is a pipe and there is no terminal to read keys from: ask with -p "question" '
            "(piped text goes with it) to get one reply without the chat."
        ) from None
    try:
        attachment = read_stream(stdin, STDIN_NAME)
        os.dup2(terminal, keys_fd)
    finally:
        os.close(terminal)
    return attachment if attachment.text.strip() else None
