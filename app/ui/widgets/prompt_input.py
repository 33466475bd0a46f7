"""The input box of a pane: a TextArea where Enter sends, ctrl+j adds a newline, ↑/↓ recall, and
the keys of a shell's line editor edit (Textual's TextArea binds most; the rest are added here)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets.text_area import EditResult, Location

from app.ui.paste import OversizedPaste, paste_refusal, pasted_text
from app.ui.patches.instant_keys import InstantKeys
from app.ui.patches.sturdy_text_area import SturdyTextArea


class PromptHistory:
    """↑/↓ through the pane's earlier messages, shell-style: the text being typed is kept as the
    newest entry, so ↓ past the end gives it back."""

    def __init__(self, entries: Callable[[], Sequence[str]]) -> None:
        self._entries = entries
        self._index: int | None = None  # into entries(); None = the draft being typed
        self._draft = ""

    def reset(self) -> None:
        self._index = None

    def older(self, current: str) -> str | None:
        entries = self._entries()
        if self._index is None:
            if not entries:
                return None
            self._draft, self._index = current, len(entries)
        if self._index == 0:
            return None
        self._index -= 1
        return entries[self._index]

    def newer(self) -> str | None:
        if self._index is None:
            return None
        entries = self._entries()
        self._index += 1
        if self._index >= len(entries):
            self._index = None
            return self._draft
        return entries[self._index]


class PromptInput(InstantKeys, SturdyTextArea):
    """Multi-line input. Enter sends because that is what every chat app does; a newline needs
    ctrl+j (what terminals send for it) or shift+enter (where the terminal reports it).

    The box is cleared the moment Enter is pressed, not when the pane gets to the message: keys
    typed right after Enter belong to the next message and must not be wiped.

    Text that ctrl+w, alt+d, ctrl+u or ctrl+k delete is kept for ctrl+y to put back, as readline
    does; ctrl+y therefore yanks rather than redoes (redo stays on super+y).
    """

    # What TextArea lacks of readline's keys (ctrl+w/d and ctrl+z it binds already). TextArea's
    # ctrl+a/e/u/k stop at the edge of a wrapped row; a shell's take the whole line, as here (a line
    # of the text: ctrl+j breaks them). home and end keep TextArea's rows.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+a", "cursor_text_line_start", "Cursor to the line's start", show=False),
        Binding("ctrl+e", "cursor_text_line_end", "Cursor to the line's end", show=False),
        Binding("ctrl+u", "delete_to_text_line_start", "Delete to the line's start", show=False),
        Binding("ctrl+k", "delete_to_text_line_end", "Delete to the line's end", show=False),
        Binding("ctrl+b", "cursor_left", "Cursor left", show=False),
        Binding("ctrl+f", "cursor_right", "Cursor right", show=False),
        Binding("alt+b", "cursor_word_left", "Cursor word left", show=False),
        Binding("alt+f", "cursor_word_right", "Cursor word right", show=False),
        Binding("alt+d", "delete_word_right", "Delete word right", show=False),
        Binding("ctrl+y", "yank", "Put back the text last deleted", show=False),
    ]

    @dataclass
    class Submitted(Message):
        """The user pressed Enter on non-blank text (already taken out of the box)."""

        prompt_input: PromptInput
        text: str

        @property
        def control(self) -> PromptInput:
            return self.prompt_input

    def __init__(
        self,
        history: Callable[[], Sequence[str]] = tuple,
        refusal: Callable[[str], str | None] = lambda text: None,
        on_key: Callable[[], None] = lambda: None,
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            compact=True,
            placeholder="Message… (Enter sends, ctrl+j newline, ↑ earlier)",
        )
        self.recall = PromptHistory(history)
        self._refusal = refusal
        self._key_pressed = on_key
        self._killed = ""  # what the last ctrl+w/alt+d/ctrl+u/ctrl+k deleted, for ctrl+y
        self._killing = False

    async def _on_key(self, event: events.Key) -> None:
        self._key_pressed()
        if event.key not in ("enter", "ctrl+j", "shift+enter"):
            await super()._on_key(event)
            return
        event.stop()
        event.prevent_default()
        if event.key == "enter":
            self._submit()
        else:
            self.insert("\n")

    def action_cursor_up(self, select: bool = False) -> None:
        """On the top visual line, ↑ recalls the previous message instead of doing nothing."""
        if not select and self.navigator.is_first_wrapped_line(self.cursor_location):
            self._recall(self.recall.older(self.text))
        else:
            super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        if not select and self.navigator.is_last_wrapped_line(self.cursor_location):
            self._recall(self.recall.newer())
        else:
            super().action_cursor_down(select)

    def _delete_via_keyboard(self, start: Location, end: Location) -> EditResult | None:
        if self._killing and not self.read_only:
            self._killed = self.get_text_range(*sorted((start, end))) or self._killed
        return super()._delete_via_keyboard(start, end)

    def _kill(self, delete: Callable[[], None]) -> None:
        self._killing = True
        try:
            delete()
        finally:
            self._killing = False

    def action_delete_word_left(self) -> None:
        self._kill(super().action_delete_word_left)

    def action_delete_word_right(self) -> None:
        self._kill(super().action_delete_word_right)

    def action_delete_to_start_of_line(self) -> None:  # TextArea's, on super+backspace: kept for ctrl+y too
        self._kill(super().action_delete_to_start_of_line)

    def _text_line_edges(self) -> tuple[Location, Location]:
        """The start and end of the cursor's line of text, however many rows it wraps to."""
        row = self.cursor_location[0]
        return (row, 0), (row, len(self.document[row]))

    def action_cursor_text_line_start(self) -> None:
        self.move_cursor(self._text_line_edges()[0])

    def action_cursor_text_line_end(self) -> None:
        self.move_cursor(self._text_line_edges()[1])

    def action_delete_to_text_line_start(self) -> None:
        """Deletes back to the line's start; at its start, the line break before it."""
        start, cursor = self._text_line_edges()[0], self.selection.end
        until = self.get_cursor_left_location() if cursor == start else start
        self._kill(lambda: self._delete_via_keyboard(until, cursor))

    def action_delete_to_text_line_end(self) -> None:
        """Deletes on to the line's end; at its end, the line break after it (emacs' kill-line)."""
        end, cursor = self._text_line_edges()[1], self.selection.end
        until = self.get_cursor_right_location() if cursor == end else end
        self._kill(lambda: self._delete_via_keyboard(cursor, until))

    def action_yank(self) -> None:
        if self._killed:
            self._replace_via_keyboard(self._killed, *self.selection)

    def _submit(self) -> None:
        if not self.text.strip():
            return
        if (reason := self._refusal(self.text)) is not None:
            self.notify(reason, severity="warning")
            return
        self.post_message(self.Submitted(self, self.take()))

    def take(self) -> str:
        """The message typed, taken out of the box; "" (the box left alone) when it is blank."""
        if not self.text.strip():
            return ""
        text = self.text
        self.clear()
        self.recall.reset()
        return text

    def _recall(self, text: str | None) -> None:
        if text is not None:
            self.restore(text)

    def restore(self, text: str) -> None:
        """Put `text` in the box with the cursor after it, where typing goes on. One undoable edit
        of its own (ctrl+z), so a draft it replaces is never lost."""
        self.history.checkpoint()
        self.replace(text, self.document.start, self.document.end)
        self.history.checkpoint()
        self.move_cursor(self.document.end)

    def give_back(self, text: str) -> None:
        """Return a message the pane could not send, ahead of anything typed since."""
        typed = self.text
        self.restore(f"{text}\n{typed}" if typed.strip() else text)

    @dataclass
    class PasteOffered(Message):
        """A paste too large for the box, whose text the parser kept: the pane may attach it."""

        prompt_input: PromptInput
        text: str

        @property
        def control(self) -> PromptInput:
            return self.prompt_input

    async def _on_oversized_paste(self, event: OversizedPaste) -> None:
        """Textual dispatches a message to the handler named after its own class. A paste too large
        to edit is offered as an attachment while its text was kept; past that, refused as any."""
        if event.text and not self.read_only:
            event.prevent_default()
            event.stop()
            self.post_message(self.PasteOffered(self, event.text))
        else:
            await self._on_paste(event)

    async def _on_paste(self, event: events.Paste) -> None:
        """A paste is text, never terminal controls (it may come from anywhere), and bounded: a
        box too big to edit would freeze the whole UI."""
        event.prevent_default()
        event.stop()
        if self.read_only:
            return
        if (refusal := paste_refusal(event, self.text)) is not None:
            self.notify(refusal, severity="warning", timeout=10, markup=False)
        elif text := pasted_text(event.text):
            self.replace(text, *self.selection)
