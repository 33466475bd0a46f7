"""The terminal while the chat app draws on it: only the app writes there.

Textual draws through `sys.__stderr__`, which is file descriptor 2. Native libraries write to
descriptor 2 directly, past Python: a Rust panic in `tokenizers` prints its message and
backtrace there, a C library its warnings, and each lands over the screen, where no redraw
removes it. So while the app runs, Textual is given its own copy of the terminal, and descriptor
2 points at /dev/null (the error itself still reaches the pane, as a sentence: see
model/text/tokenizer.py's native_crash_caught). When stderr is not a terminal (redirected to a
log), nothing draws there and nothing is moved.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

STDERR = 2


@contextlib.contextmanager
def native_stderr_aside() -> Iterator[None]:
    """While inside, Python's stderr (`sys.stderr`, `sys.__stderr__`: Textual's drawing, its error
    report at exit) writes to the terminal, and descriptor 2 to /dev/null."""
    original, current = sys.__stderr__, sys.stderr
    if original is None or not os.isatty(STDERR):
        yield
        return
    original.flush()
    terminal = os.fdopen(os.dup(STDERR), "w", encoding=original.encoding, errors=original.errors)
    saved = os.dup(STDERR)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, STDERR)
    os.close(null)
    sys.__stderr__ = sys.stderr = terminal
    try:
        yield
    finally:
        sys.__stderr__, sys.stderr = original, current
        with contextlib.suppress(OSError):  # a hung-up terminal
            terminal.close()
        os.dup2(saved, STDERR)
        os.close(saved)
