"""Bracketed pastes arrive as text, never as key presses.

Textual's XTermParser (8.x) parses escape sequences inside a bracketed paste like typed input:
an ESC sequence longer than 32 characters, or one cut by the escape timeout, is re-issued as
key events, so a pasted log could press ctrl+q (quit) or ctrl+g, and the paste loses those
characters. This parser takes everything between the paste markers itself and hands it over as
one `Paste` event, untouched; widgets decide what of it to keep (the prompt strips controls).

The start marker is recognised when it arrives whole in one read, which is how terminals send
it (with the text); a read boundary inside the 6-byte marker falls back to Textual's parsing.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual._xterm_parser import BRACKETED_PASTE_END, BRACKETED_PASTE_START, XTermParser
from textual.message import Message


class PasteSafeParser(XTermParser):
    def __init__(self, debug: bool = False) -> None:
        super().__init__(debug)
        self._paste: list[str] | None = None  # the paste so far, while inside one
        self._tail = ""  # the end of a chunk that may be the start of the end marker

    def feed(self, data: str) -> Iterable[Message]:
        if not data:  # end of input: a paste never closed is still the user's text
            if self._paste is not None:
                yield events.Paste("".join(self._paste) + self._tail)
                self._paste, self._tail = None, ""
            yield from super().feed(data)
            return
        while data:
            if self._paste is None:
                before, found, data = data.partition(BRACKETED_PASTE_START)
                if before:
                    yield from super().feed(before)
                if found:
                    self._paste = []
                continue
            data = self._tail + data
            body, found, data = data.partition(BRACKETED_PASTE_END)
            if found:
                yield events.Paste("".join([*self._paste, body]))
                self._paste, self._tail = None, ""
            else:
                keep = _partial_marker_length(body)
                self._paste.append(body[: len(body) - keep])
                self._tail = body[len(body) - keep :]


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
