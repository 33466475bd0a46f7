"""While the chat app draws, a native library's writes to descriptor 2 (a Rust panic's message)
go nowhere, and Python's stderr, which Textual draws through, still reaches the terminal."""

from __future__ import annotations

import contextlib
import os
import sys

from cli.terminal import native_stderr_aside


def drained(leader: int) -> bytes:
    """Everything written to the pty so far (each write may be its own read)."""
    os.set_blocking(leader, False)
    shown = b""
    with contextlib.suppress(OSError):  # EAGAIN: nothing more; EIO: the other end is closed
        while chunk := os.read(leader, 4096):
            shown += chunk
    os.close(leader)
    return shown


def test_native_writes_to_fd_2_stay_off_the_terminal_and_textuals_reach_it() -> None:
    leader, follower = os.openpty()  # descriptor 2 must be a terminal for the guard to act
    saved = os.dup(2)
    before = sys.__stderr__, sys.stderr
    os.dup2(follower, 2)
    try:
        with native_stderr_aside():
            os.write(2, b"thread '<unnamed>' panicked at onig/src/lib.rs\n")  # as Rust writes it
            sys.__stderr__.write("DRAWN-BY-TEXTUAL\n")
            sys.__stderr__.flush()
            sys.stderr.write("PYTHON-STDERR\n")
            sys.stderr.flush()
        os.write(2, b"AFTER\n")  # descriptor 2 is the terminal again
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(follower)
    shown = drained(leader)
    assert b"DRAWN-BY-TEXTUAL" in shown and b"PYTHON-STDERR" in shown and b"AFTER" in shown
    assert b"panicked" not in shown
    assert (sys.__stderr__, sys.stderr) == before
