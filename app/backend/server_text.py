"""A server's strings, made safe to show, at the one place they enter the app.

The server behind --server may be anyone's: a model id, an error message or a finish reason can
hold terminal control sequences (OSC 52 writes the clipboard, OSC 0 the window title, CSI 2 J
clears the screen) or be megabytes long. Every string the remote backend reads from a server goes
through `server_text` before anything keeps it, so the title bar, the error screen and the panes
only ever see clean, short, one-line text. Markup needs no escaping here: every widget that shows
these strings is built with markup=False, so `[bold]` shows as the characters it is.
"""

from __future__ import annotations

from app.core.sanitize import strip_control

MODEL_ID_CHARS = 256  # a Hub repo id is at most 96 + 1 + 96
MESSAGE_CHARS = 2048  # an error message or body, as shown


def server_text(value: object, limit: int = MESSAGE_CHARS) -> str:
    """`value` (any JSON value, or an exception) as one clean line of at most `limit` characters."""
    text = value if isinstance(value, str) else _as_text(value)
    text = " ".join(strip_control(text[: limit * 4]).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_text(value: object) -> str:
    try:
        return str(value)
    except (RecursionError, ValueError):  # a nested value too deep, an int too long to print
        return f"(a {type(value).__name__} that cannot be shown)"
