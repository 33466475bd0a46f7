"""Past conversations, newest first: search, reopen, rename, delete (after a second press)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from app.core.sanitize import for_display, strip_control
from app.store.database import ConversationSummary
from app.store.persistence import Saver
from app.ui.keys import key_named
from app.ui.patches.instant_keys import InstantInput
from app.ui.widgets.key_footer import KeyFooter

CONFIRM_SECONDS = 3.0


def describe(summary: ConversationSummary, is_open: bool) -> Text:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(summary.updated_at))
    count = summary.message_count
    messages = f"{count} message" + ("" if count == 1 else "s")
    return Text.assemble(
        (for_display(summary.title) or "(empty)", "bold"),
        (f"\n  {when} · {messages}" + (" · open" if is_open else ""), "dim"),
    )


class HistoryScreen(ModalScreen[int | None]):
    """Dismisses with the id of the conversation to open, or None.

    The list has focus; typing goes to the search box, which filters titles and message text.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="history_close"),
        Binding("enter", "open", "Open", id="history_open", show=True),
        Binding(
            "ctrl+r",
            "rename",
            "Rename",
            id="history_rename",
            tooltip="Rename the highlighted conversation",
            priority=True,
        ),
        Binding(
            "delete,ctrl+d",
            "delete",
            "Delete",
            id="history_delete",
            priority=True,
            tooltip="Delete the highlighted conversation (press twice)",
        ),
        Binding("down", "move(1)", "", show=False, priority=True),
        Binding("up", "move(-1)", "", show=False, priority=True),
    ]

    def __init__(
        self,
        saver: Saver,
        open_ids: Collection[int | None],
        release: Callable[[int], Awaitable[None]],
    ) -> None:
        """`release(id)`: the chat screen lets go of a conversation open in a pane before it is deleted."""
        super().__init__()
        self.saver = saver
        self.open_ids = set(open_ids)
        self.release = release
        self._renaming: int | None = None
        self._confirm: tuple[int, float] | None = None
        self.search = InstantInput(
            placeholder="Search titles and messages…", id="history-search", compact=True
        )
        self.options = OptionList(id="history-list")

    def compose(self) -> ComposeResult:
        with Vertical(id="history-dialog") as dialog:
            dialog.border_title = "History"
            yield Label(self._help(), id="history-title", markup=False)
            yield self.search
            yield self.options
        yield KeyFooter()

    def _help(self) -> str:
        """The keys as they are in force (keymap.json may have moved them)."""
        keys = {name: key_named(self.app, self.BINDINGS, f"history_{name}") for name in ("rename", "delete")}
        return (
            f"Type to search · Enter opens · {keys['rename']} renames · {keys['delete']} deletes · Esc closes"
        )

    def on_mount(self) -> None:
        self._fill()
        self.search.focus()

    def _fill(self, keep: int | None = None) -> None:
        options = self.options
        options.clear_options()
        summaries = self.saver.store.summaries(self.search.value.strip())
        options.add_options(Option(describe(s, s.id in self.open_ids), id=str(s.id)) for s in summaries)
        if not summaries:
            empty = "No match." if self.search.value.strip() else "No saved conversations yet."
            options.add_option(Option(empty, disabled=True))
        ids = [s.id for s in summaries]
        options.highlighted = ids.index(keep) if keep in ids else (0 if summaries else None)

    def _highlighted_id(self) -> int | None:
        option = self.options.highlighted_option
        return None if option is None or option.id is None else int(option.id)

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._renaming is None:
            self._fill()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self._renaming is None:
            self.action_open()
            return
        cid, self._renaming = self._renaming, None
        if self.saver.rename(cid, strip_control(event.value).strip()):
            self.notify("Renamed.")
        self.search.placeholder = "Search titles and messages…"
        self.search.value = ""
        self._fill(keep=cid)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(int(event.option.id))

    def action_move(self, step: int) -> None:
        self.options.action_cursor_down() if step > 0 else self.options.action_cursor_up()

    def action_open(self) -> None:
        if (cid := self._highlighted_id()) is not None:
            self.dismiss(cid)

    def action_rename(self) -> None:
        """The search box turns into the name field for a moment: Enter saves, an empty name
        goes back to titling by the first message."""
        if (cid := self._highlighted_id()) is None:
            return
        self._renaming = cid
        self.search.placeholder = "New name (Enter saves, empty = first message)"
        self.search.value = ""
        self.search.focus()

    async def action_delete(self) -> None:
        cid = self._highlighted_id()
        if cid is None:
            return
        now = time.monotonic()
        if self._confirm is None or self._confirm[0] != cid or now > self._confirm[1]:
            self._confirm = (cid, now + CONFIRM_SECONDS)
            again = key_named(self.app, self.BINDINGS, "history_delete")
            opened = (
                " It is open in a pane, which will start a new conversation." if cid in self.open_ids else ""
            )
            self.notify(
                f"Press {again} again to delete it for good.{opened}",
                severity="warning",
                timeout=CONFIRM_SECONDS,
            )
            return
        self._confirm = None
        if cid in self.open_ids:
            await self.release(cid)
            self.open_ids.discard(cid)
        index = self.options.highlighted or 0
        if self.saver.delete(cid):
            self._fill()
            if self.options.option_count:
                self.options.highlighted = min(index, self.options.option_count - 1)
