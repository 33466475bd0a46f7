"""Why lfm-chat cannot start, and what to try instead: a message, never a traceback."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, Static

HINT = (
    "Try `lfm-chat --demo` to run on a tiny random model that needs no download, "
    "or `lfm-chat --model PATH` to use an LFM2 checkpoint directory on this machine."
)


class ErrorScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape", "leave", "Quit", id="error_quit"),
    ]

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box"):
            yield Label("lfm-chat could not start", id="error-title")
            yield Static(self.reason, id="error-reason", markup=False)
            yield Static(HINT, id="error-hint", markup=False)
        yield Footer()

    def action_leave(self) -> None:
        self.app.exit(return_code=1, message=f"lfm-chat: {self.reason}")
