"""A tool call's run in the transcript: the tool, a line while it waits on the user or runs, and its
result folded to its first lines (a click opens it whole).

Live, the pane's session drives it (`ToolCallView`); restored, it is made from the saved `tool`
message. Everything in it came from a tool or a model: drawn as plain text, controls stripped.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Click
from textual.widgets import Static

from app.core.conversation import ChatMessage
from app.core.sanitize import for_display
from app.session.tools import folded
from app.ui.patches.laid_out_once import LaidOutOnce


class ToolMessage(LaidOutOnce, Vertical):
    """One call's run, and then its result as the model was sent it."""

    def __init__(self, name: str, result: str | None = None, is_error: bool = False) -> None:
        super().__init__(classes="tool-message")
        self.tool_name = for_display(name)
        self.border_title = Content(f"tool · {self.tool_name}")
        self.status = Static("", classes="tool-status", markup=False)
        self.body = Static("", classes="tool-result", markup=False)
        self.result = ""
        self.opened = False
        if result is not None:
            self.show_result(result, is_error)
        else:
            self.body.display = False

    @classmethod
    def restored(cls, message: ChatMessage) -> ToolMessage:
        return cls(message.name or "tool", message.content, message.content.startswith("Error: "))

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.body

    @property
    def text(self) -> str:
        """What copying it gives: the result."""
        return self.result

    def show_status(self, text: str) -> None:
        self.status.update(for_display(text))
        self.status.display = True

    def show_result(self, text: str, is_error: bool) -> None:
        self.result = text
        self.set_class(is_error, "-error")
        self.status.display = False
        self.body.display = True
        self._draw()

    def on_click(self, event: Click) -> None:
        event.stop()
        self.opened = not self.opened
        self._draw()

    def _draw(self) -> None:
        shown, more = (self.result, 0) if self.opened else folded(self.result)
        size = f"{len(self.result):,} characters"
        more_line = f"\n… {more} more lines · {size} · click to open" if more else ""
        self.body.update(for_display(shown) + more_line)
        self.border_subtitle = Content(size)
