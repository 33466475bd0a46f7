"""Asks for the path of a file to attach to a pane's next message (the attach key; `/file PATH`
typed in the prompt does the same without the dialog, and keeps nothing typed from being moved)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class AttachScreen(ModalScreen[str | None]):
    """Dismisses with the path typed, or None when cancelled (Esc, or Enter on nothing)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel", id="attach_cancel")]

    def __init__(self, pane_label: str) -> None:
        super().__init__()
        self.pane_label = pane_label

    def compose(self) -> ComposeResult:
        with Vertical(id="attach-dialog"):
            yield Label(f"Attach a text file to pane {self.pane_label}'s next message (~ = home):")
            yield Input(placeholder="path/to/notes.md", id="attach-path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)
