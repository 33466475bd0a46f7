"""The main screen: a grid of chat panes on one shared engine, the dashboard, and persistence."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import Grid
from textual.events import DescendantFocus, Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.worker import get_current_worker

from app.conversation import ChatMessage, ChatSettings, Conversation
from app.keys import key, palette_commands
from app.options import MAX_PANES
from app.screens.history import HistoryScreen
from app.store import Store
from app.widgets.chat_pane import ChatPane, PaneContext
from app.widgets.dashboard import Dashboard
from engine import EngineSnapshot

MIN_WIDTH, MIN_HEIGHT = 40, 12
DEMO_BANNER = "DEMO · random weights: replies are gibberish · --model PATH for a real LFM2"


def grid_shape(panes: int) -> tuple[int, int]:
    """Columns and rows that keep every pane visible: side by side up to three, then rows."""
    columns = 1 if panes == 1 else 2 if panes in (2, 4) else 3
    return columns, math.ceil(panes / columns)


class ChatScreen(Screen[None]):
    """Owns the panes, feeds the dashboard from engine snapshots, and saves conversations."""

    BINDINGS: ClassVar[list[BindingType]] = [
        key("ctrl+n", "new_pane", "New", "Open a new pane"),
        key("ctrl+w", "close_pane", "Close", "Close the active pane (its chat stays in history)"),
        key("ctrl+g", "history", "History", "History: reopen a saved conversation"),
        key("ctrl+d", "toggle_dashboard", "Dashboard", "Show or hide the engine dashboard", show=False),
        key("tab", "focus_pane(1)", "Next pane", "Focus the next pane", show=False, id="next_pane"),
        key("shift+tab", "focus_pane(-1)", "Back", "Focus the previous pane", show=False, id="previous_pane"),
    ]

    @dataclass
    class EngineSnapshotted(Message):
        """The latest engine snapshot; a newer one replaces it if the UI has not caught up."""

        snapshot: EngineSnapshot

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ChatScreen.EngineSnapshotted)

    def __init__(
        self,
        context: PaneContext,
        store: Store,
        conversations: Sequence[Conversation],
        defaults: ChatSettings,
        *,
        title: str = "lfm-chat",
        demo: bool = False,
        snapshot_interval: float = 0.25,
    ) -> None:
        super().__init__()
        self.context = context
        self.store = store
        self.defaults = defaults
        self.title_text = title
        self.demo = demo
        self.snapshot_interval = snapshot_interval
        self._initial = list(conversations)
        self._pane_count = 0
        self.active_pane_id: str | None = None
        self.grid = Grid(id="panes")
        self.dashboard = Dashboard(id="dashboard")

    def compose(self) -> ComposeResult:
        yield Static(self.title_text, id="title-bar", markup=False)
        if self.demo:
            yield Static(DEMO_BANNER, id="demo-banner")
        with self.grid:
            yield from (self._new_pane(c) for c in self._initial)
        yield self.dashboard
        yield Static("Terminal too small: make it at least 40×12.", id="too-small")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._relayout()
        self.panes[0].focus_input()
        self._check_size(self.app.size.width, self.app.size.height)
        self._monitor()

    @property
    def panes(self) -> list[ChatPane]:
        return list(self.query(ChatPane))

    def pane(self, pane_id: str) -> ChatPane | None:
        return next((p for p in self.panes if p.id == pane_id), None)

    @property
    def active_pane(self) -> ChatPane:
        """The pane the user last typed in (focus may be in the command palette meanwhile)."""
        return self.pane(self.active_pane_id or "") or self.panes[0]

    def _new_pane(self, conversation: Conversation) -> ChatPane:
        self._pane_count += 1
        return ChatPane(conversation, self.context, id=f"pane-{self._pane_count}")

    def _relayout(self) -> None:
        self.grid.styles.grid_size_columns, self.grid.styles.grid_size_rows = grid_shape(len(self.panes))

    # ------------------------------------------------------------------ engine -> panes
    @work(thread=True, exclusive=True, group="monitor")
    def _monitor(self) -> None:
        """Read the worker's published snapshot a few times a second; never touches the model.

        Only a new snapshot is posted: an idle engine publishes none, so an idle app stays idle.
        """
        worker = get_current_worker()
        last = None
        while not worker.is_cancelled:
            snapshot = self.context.worker.snapshot()
            if snapshot is not last:
                self.post_message(self.EngineSnapshotted(snapshot))
                last = snapshot
            time.sleep(self.snapshot_interval)

    async def on_chat_pane_streamed(self, message: ChatPane.Streamed) -> None:
        pane = self.pane(message.pane_id)
        if pane is not None:
            await pane.apply(message.event)

    def on_chat_screen_engine_snapshotted(self, message: EngineSnapshotted) -> None:
        snap = message.snapshot
        panes = {p.id: p for p in self.panes}
        for request in snap.requests:
            if (pane := panes.get(request.tag)) is not None:  # type: ignore[arg-type]
                pane.apply_snapshot(request)
        if self.dashboard.display:
            self.dashboard.show(snap, {pane_id: f"pane {p.label}" for pane_id, p in panes.items()})

    # ------------------------------------------------------------------ persistence
    def on_chat_pane_changed(self, message: ChatPane.Changed) -> None:
        self.save(message.pane.conversation)

    def save(self, conversation: Conversation) -> None:
        """Persist one conversation (empty ones are not history) and which ones are open."""
        if conversation.messages:
            conversation.updated_at = time.time()
            self.store.save(conversation)
        self._save_open()

    def _save_open(self) -> None:
        self.store.set_open([p.conversation.id for p in self.panes if p.conversation.id is not None])

    async def save_all(self) -> None:
        """On quit: every pane, with any reply still streaming kept as it stands."""
        for pane in self.panes:
            await self._settle(pane)

    async def _settle(self, pane: ChatPane) -> None:
        """Stop the pane's request now, keep what it streamed, and save: for a pane going away.

        The turn is detached first, so its final (abort) event finds no turn and is ignored.
        """
        turn, pane.turn = pane.turn, None
        if turn is not None:
            turn.handle.cancel()
            await turn.stream.stop()
            if turn.shown:
                pane.conversation.messages.append(ChatMessage("assistant", turn.shown))
        self.save(pane.conversation)

    # ------------------------------------------------------------------ actions
    def on_descendant_focus(self, event: DescendantFocus) -> None:
        pane = next((a for a in event.widget.ancestors_with_self if isinstance(a, ChatPane)), None)
        if pane is not None:
            self.active_pane_id = pane.id

    async def action_new_pane(self, conversation: Conversation | None = None) -> None:
        if len(self.panes) >= MAX_PANES:
            self.notify(f"At most {MAX_PANES} panes fit on screen.", severity="warning")
            return
        pane = self._new_pane(conversation or Conversation(settings=replace(self.defaults)))
        await self.grid.mount(pane)
        self._relayout()
        pane.focus_input()
        self.save(pane.conversation)

    async def action_close_pane(self) -> None:
        if len(self.panes) == 1:
            self.notify("The last pane stays open: ctrl+l clears it.", severity="warning")
            return
        pane = self.active_pane
        index = self.panes.index(pane)
        await self._settle(pane)
        await pane.remove()
        self._save_open()
        self._relayout()
        self.panes[min(index, len(self.panes) - 1)].focus_input()

    def action_toggle_dashboard(self) -> None:
        self.dashboard.display = not self.dashboard.display

    def action_focus_pane(self, step: int) -> None:
        """A priority binding and `set_focus` (not `Widget.focus`, which defers): keys typed right after
        Tab land in the new pane instead of the old one."""
        panes = self.panes
        index = panes.index(self.active_pane) if self.active_pane_id else -step
        self.set_focus(panes[(index + step) % len(panes)].prompt_input)

    def action_history(self) -> None:
        open_ids = {p.conversation.id for p in self.panes}
        self.app.push_screen(HistoryScreen(self.store, open_ids), self._reopen)

    async def _reopen(self, conversation_id: int | None) -> None:
        if conversation_id is None:
            return
        pane = next((p for p in self.panes if p.conversation.id == conversation_id), None)
        if pane is not None:
            pane.focus_input()
        elif (conversation := self.store.load(conversation_id)) is not None:
            await self.action_new_pane(conversation)

    def system_commands(self) -> Iterable[SystemCommand]:
        """Every binding of this screen and of the panes (acting on the active pane), for the palette."""
        yield from palette_commands(self.app, self.BINDINGS, self.run_action)
        yield from palette_commands(self.app, ChatPane.BINDINGS, self._run_pane_action)

    async def _run_pane_action(self, action: str) -> None:
        await self.active_pane.run_action(action)

    # ------------------------------------------------------------------ size
    def on_resize(self, event: Resize) -> None:
        self._check_size(event.size.width, event.size.height)

    def _check_size(self, width: int, height: int) -> None:
        self.set_class(width < MIN_WIDTH or height < MIN_HEIGHT, "-too-small")
