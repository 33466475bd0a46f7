"""Text typed before the panes exist (the loading screen is up while the model loads), kept for
the first pane's box: a user who starts typing at launch loses nothing."""

from __future__ import annotations

from textual import events

from app.ui.paste import PASTE_LIMIT_BYTES, paste_refusal, pasted_text


class TypeAhead:
    """Printable keys, Enter as a new line, Backspace, and pastes under the box's own rules
    (app/ui/paste.py: cleaned, and refused past its limit with the sentence the box would show)."""

    def __init__(self) -> None:
        self.text = ""

    def key(self, event: events.Key) -> bool:
        """Take ``event`` if it types; False for any other key (bindings keep theirs)."""
        if event.key == "backspace":
            self.text = self.text[:-1]
        elif event.key == "enter" or (event.is_printable and event.character):
            if len(self.text) < PASTE_LIMIT_BYTES:
                self.text += "\n" if event.key == "enter" else event.character
        else:
            return False
        return True

    def paste(self, event: events.Paste) -> str | None:
        """Take a paste; or the sentence why not, for a notice (the text held stays)."""
        if (refusal := paste_refusal(event, self.text)) is not None:
            return refusal
        self.text += pasted_text(event.text)
        return None
