"""Past conversations, newest first; Enter reopens one in a pane."""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from app.sanitize import strip_control
from app.store import ConversationSummary, Store


def describe(summary: ConversationSummary, is_open: bool) -> Text:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.updated_at))
    return Text.assemble(
        (strip_control(summary.title) or "(empty)", "bold"),
        (f"\n  {when} · {summary.message_count} messages" + (" · open" if is_open else ""), "dim"),
    )


class HistoryScreen(ModalScreen[int | None]):
    """Dismisses with the id of the conversation to open, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="history_close"),
        Binding(
            "delete,d", "delete", "Delete", id="history_delete", tooltip="Delete the highlighted conversation"
        ),
    ]

    def __init__(self, store: Store, open_ids: Collection[int | None]) -> None:
        super().__init__()
        self.store = store
        self.open_ids = open_ids

    def compose(self) -> ComposeResult:
        with Vertical(id="history-dialog"):
            yield Label("History · Enter opens · d deletes · Esc closes", id="history-title")
            yield OptionList(id="history-list")

    def on_mount(self) -> None:
        self._fill()
        self.query_one(OptionList).focus()

    def _fill(self) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        summaries = self.store.summaries()
        options.add_options(Option(describe(s, s.id in self.open_ids), id=str(s.id)) for s in summaries)
        if not summaries:
            options.add_option(Option("No saved conversations yet.", disabled=True))
        options.highlighted = 0 if summaries else None

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(int(event.option.id))

    def action_delete(self) -> None:
        options = self.query_one(OptionList)
        option = options.highlighted_option
        if option is None or option.id is None:
            return
        if int(option.id) in self.open_ids:
            self.notify("That conversation is open in a pane; close the pane first.", severity="warning")
            return
        self.store.delete(int(option.id))
        self._fill()
