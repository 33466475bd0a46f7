"""Text typed before the panes exist (the loading screen is up while the model loads), kept for
the first pane's box: a user who starts typing at launch loses nothing."""

from __future__ import annotations

from textual import events

from app.paste import PASTE_LIMIT_BYTES
from app.sanitize import strip_control


class TypeAhead:
    """Printable keys, Enter as a new line, Backspace, and pastes (control sequences stripped);
    at most PASTE_LIMIT_BYTES of it, as a paste into the box may hold."""

    def __init__(self) -> None:
        self.text = ""

    def key(self, event: events.Key) -> bool:
        """Take ``event`` if it types; False for any other key (bindings keep theirs)."""
        if event.key == "backspace":
            self.text = self.text[:-1]
        elif event.key == "enter":
            self._add("\n")
        elif event.is_printable and event.character:
            self._add(event.character)
        else:
            return False
        return True

    def paste(self, text: str) -> None:
        self._add(strip_control(text))

    def _add(self, text: str) -> None:
        room = PASTE_LIMIT_BYTES - len(self.text.encode())
        if len(text.encode()) <= room:
            self.text += text
