"""Bracketed pastes arrive as text, never as key presses.

Textual's XTermParser (8.x) parses escape sequences inside a bracketed paste like typed input:
an ESC sequence longer than 32 characters, or one cut by the escape timeout, is re-issued as
key events, so a pasted log could press ctrl+q (quit) or ctrl+g, and the paste loses those
characters. This parser takes everything between the paste markers itself and hands it over as
one `Paste` event, untouched; widgets decide what of it to keep (the prompt strips controls, and
offers a paste larger than PASTE_LIMIT_BYTES as an attachment instead of holding it).

The start marker is recognised when it arrives whole in one read, which is how terminals send
it (with the text); a read boundary inside the 6-byte marker falls back to Textual's parsing.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual._xterm_parser import BRACKETED_PASTE_END, BRACKETED_PASTE_START, XTermParser
from textual.message import Message

from app.core.attachment import ATTACHMENT_LIMIT_BYTES
from app.core.sanitize import strip_control

PASTE_LIMIT_BYTES = 256 * 1024
"""The most UTF-8 text the prompt box may hold after a paste. A TextArea re-wraps its text on every
edit: a 5 MB paste froze the UI for ~50 s at 1.6 GB RSS. 256 KiB is a long document (~60k tokens,
more than most contexts) and stays responsive; a larger paste is refused whole, with a notice."""


class OversizedPaste(events.Paste):
    """A paste larger than PASTE_LIMIT_BYTES: its text up to ATTACHMENT_LIMIT_BYTES (to be attached),
    beyond that only its size, so a 400 MB paste costs no memory."""

    def __init__(self, size: int, text: str = "") -> None:
        super().__init__(text)
        self.size = size


class PasteSafeParser(XTermParser):
    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self._paste: list[str] | None = None  # the paste so far, while inside one
        self._size = 0  # its UTF-8 bytes so far; past ATTACHMENT_LIMIT_BYTES the text is no longer kept
        self._tail = ""  # the end of a chunk that may be the start of the end marker

    def feed(self, data: str) -> Iterable[Message]:
        if not data:  # end of input: a paste never closed is still the user's text
            if self._paste is not None:
                self._keep(self._tail)
                yield self._finish()
            yield from super().feed(data)
            return
        while data:
            if self._paste is None:
                before, found, data = data.partition(BRACKETED_PASTE_START)
                if before:
                    yield from super().feed(before)
                if found:
                    self._paste, self._size = [], 0
                continue
            data = self._tail + data
            body, found, data = data.partition(BRACKETED_PASTE_END)
            if found:
                self._keep(body)
                yield self._finish()
            else:
                keep = _partial_marker_length(body)
                self._keep(body[: len(body) - keep])
                self._tail = body[len(body) - keep :]

    def _keep(self, text: str) -> None:
        """Add `text` to the paste, or only to its size once the paste is past what may be attached."""
        self._size += len(text.encode("utf-8", "replace"))
        if self._size > ATTACHMENT_LIMIT_BYTES:
            self._paste = []
        else:
            self._paste.append(text)

    def _finish(self) -> events.Paste:
        if self._size > PASTE_LIMIT_BYTES:
            paste: events.Paste = OversizedPaste(self._size, "".join(self._paste))
        else:
            paste = events.Paste("".join(self._paste))
        self._paste, self._tail, self._size = None, "", 0
        return paste


def _partial_marker_length(text: str) -> int:
    """How many characters at the end of `text` could begin the end marker (held for the next chunk)."""
    for length in range(min(len(text), len(BRACKETED_PASTE_END) - 1), 0, -1):
        if BRACKETED_PASTE_END.startswith(text[-length:]):
            return length
    return 0


def install() -> None:
    """Make Textual's Linux/macOS driver build this parser (it looks the class up at input start)."""
    from textual.drivers import linux_driver

    linux_driver.XTermParser = PasteSafeParser  # type: ignore[misc]


def pasted_text(raw: str) -> str:
    """A paste as a box takes it: line ends as newlines, no terminal controls (it may come from anywhere)."""
    return strip_control(raw.replace("\r\n", "\n").replace("\r", "\n"))


def paste_refusal(paste: events.Paste, held: str) -> str | None:
    """Why `paste` may not go into a box holding `held` (one sentence naming the cap), or None."""
    size = paste.size if isinstance(paste, OversizedPaste) else len(paste.text.encode("utf-8", "replace"))
    if size > ATTACHMENT_LIMIT_BYTES:
        most = _size(ATTACHMENT_LIMIT_BYTES)
        return f"Paste of {_size(size)} is larger than {most}, the most a message may attach: not inserted."
    if size > PASTE_LIMIT_BYTES:
        return f"Paste of {_size(size)} is larger than {_size(PASTE_LIMIT_BYTES)}: not inserted."
    if size + len(held.encode("utf-8", "replace")) > PASTE_LIMIT_BYTES:
        return (
            f"Paste of {_size(size)} would make the message larger than {_size(PASTE_LIMIT_BYTES)}:"
            " not inserted."
        )
    return None


def _size(size: int) -> str:
    """256 KiB or 1 MiB for a cap (a power of two), 5.0 MB / 300.0 KB for what was pasted."""
    if size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    if size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size / 1e6:.1f} MB" if size >= 1_000_000 else f"{size / 1e3:.1f} KB"
