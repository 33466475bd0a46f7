"""The main screen: a grid of chat panes on one shared backend, the dashboard, and save warnings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import Grid
from textual.events import DescendantFocus, Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import get_current_worker

from app.backend.base import Backend
from app.backend.server_metrics import ServerSnapshot
from app.core.conversation import ChatSettings, Conversation
from app.core.options import MAX_PANES
from app.session import ConversationSaver, SessionContext
from app.session.tool_loop import TOOL_WAITS
from app.store.persistence import Saver
from app.ui.keys import PANE_KEYS, key, key_named, palette_commands
from app.ui.layout import plan_layout
from app.ui.pane_context import PaneContext
from app.ui.patches.dirty_regions import DirtyRegionsCompositor
from app.ui.quiet_collections import COLLECT_SECONDS, QuietCollections
from app.ui.screens.history import HistoryScreen
from app.ui.widgets.chat_pane import ChatPane
from app.ui.widgets.dashboard import Dashboard
from app.ui.widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from app.session.tools import PaneTools
    from app.tools.toolbox import ToolBox
    from engine import EngineSnapshot

DEMO_BANNER = "DEMO · random weights: replies are gibberish · --model PATH for a real LFM2"
CONFIRM_SECONDS = 3.0
BANNER_MIN_HEIGHT = 20  # below this the demo banner's row goes to the panes
RETRY_SECONDS = 5.0


class ChatScreen(Screen[None]):
    """Owns the panes, feeds the dashboard from the backend's snapshots, and shows what saving says.

    Each pane's session saves its own conversation (app/session/saving.py); the screen tells the
    saver which sessions are open and retries failed writes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        key("alt+n", "new_pane", "New", "Open a new pane"),
        key("alt+w", "close_pane", "Close", "Close the active pane (its chat stays in history)"),
        key("ctrl+g", "history", "History", "History: reopen a saved conversation"),
        key("f9", "toggle_dashboard", "Dashboard", "Show or hide the engine dashboard"),
        key("f8", "mcp_servers", "Tools", "MCP servers: their state and tools", show=False),
        key("alt+z", "zoom", "Zoom", "Show the active pane full screen, or every pane again", show=False),
        key("tab", "focus_pane(1)", "Next pane", "Focus the next pane", id="next_pane"),
        key("shift+tab", "focus_pane(-1)", "Back", "Focus the previous pane", show=False, id="previous_pane"),
    ]

    @dataclass
    class Snapshotted(Message):
        """The backend's latest snapshot; a newer one replaces it if the UI has not caught up."""

        snapshot: EngineSnapshot | ServerSnapshot

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ChatScreen.Snapshotted)

    def __init__(
        self,
        backend: Backend,
        saver: Saver,
        conversations: Sequence[Conversation],
        defaults: ChatSettings,
        *,
        files_dir: Path,
        title: str = "lfm-chat",
        demo: bool = False,
        snapshot_interval: float = 0.25,
        typed_ahead: str = "",
    ) -> None:
        super().__init__()
        self._compositor = DirtyRegionsCompositor()  # a frame renders only what is under its changes
        self._typed_ahead = typed_ahead
        self.saver = saver
        self.saving = ConversationSaver(saver, self._show_save_problem)
        self.context = PaneContext(SessionContext(backend, self.saving), files_dir)
        self._collections = QuietCollections(lambda: self.context.pacer.typed_at)  # full GCs off the keys
        self.defaults = defaults
        self.title_text = title
        self.demo = demo
        self.snapshot_interval = snapshot_interval
        self._initial = list(conversations)
        self._pane_count = 0
        self._numbers: dict[str, int] = {}  # pane id -> the number it shows, kept until it closes
        self.active_pane_id: str | None = None
        self.dashboard_wanted = True
        self._confirming: tuple[str, float] | None = None  # (what, until): a second press does it
        self.grid = Grid(id="panes")
        self.dashboard = Dashboard(id="dashboard", architecture=backend.architecture)
        self.save_warning = Static("", id="save-warning", markup=False)
        self.too_small = Static("", id="too-small", markup=False)

    def compose(self) -> ComposeResult:
        yield Static(self.title_text, id="title-bar", markup=False)
        yield Static(DEMO_BANNER, id="demo-banner")  # hidden unless the demo runs (see _relayout)
        yield self.save_warning
        with self.grid:
            yield from (self._new_pane(c) for c in self._initial)
        yield self.dashboard
        yield self.too_small
        yield KeyFooter()

    def on_mount(self) -> None:
        self._relayout()
        self.panes[0].focus_input()
        self.take_typed_ahead(self._typed_ahead)
        self.set_interval(RETRY_SECONDS, self._retry_saves)
        self._collections.start()
        self.set_interval(COLLECT_SECONDS, self._collections.tick)
        self._monitor()
        self._offer_tools()

    def on_unmount(self) -> None:
        self._collections.stop()

    @work(thread=True, exclusive=True, group="tools")
    def _offer_tools(self) -> None:
        """Panes offer the tools of mcp.json's (and --mcp FILE's) servers once the ToolBox is made: on
        a thread (the MCP SDK takes seconds to import), and not at all when no server is configured.
        The servers themselves start when a pane first sends with their tools."""
        from app.tools.config import app_servers

        app = self.app
        options = app.options  # type: ignore[attr-defined]
        if app_servers(options.data_dir, options.mcp_file)[0]:
            toolbox = app.toolbox  # type: ignore[attr-defined]
            app.call_from_thread(self._tools_known, toolbox)

    def _tools_known(self, toolbox: ToolBox) -> None:
        self.context.sessions.toolbox = toolbox
        for pane in self.panes:
            pane.changed()  # the border counts the tools offered

    @property
    def panes(self) -> list[ChatPane]:
        # the grid's children, not a query of the screen: that walks every widget of every transcript
        return list(self.grid.query_children(ChatPane))

    def pane(self, pane_id: str) -> ChatPane | None:
        return next((p for p in self.panes if p.id == pane_id), None)

    def take_typed_ahead(self, text: str) -> None:
        """What was typed while a model loaded goes into the active pane's box, after what it holds
        (a restored draft), unsent: the user sees it and sends it."""
        text = text.rstrip("\n")
        if not text.strip():
            return
        box = self.active_pane.prompt_input
        box.restore(box.text + text)

    @property
    def active_pane(self) -> ChatPane:
        """The pane holding focus now; else the one last typed in (focus may be in the palette)."""
        focused = self.focused
        pane = (
            next((a for a in focused.ancestors_with_self if isinstance(a, ChatPane)), None)
            if focused
            else None
        )
        return pane or self.pane(self.active_pane_id or "") or self.panes[0]

    def _new_pane(self, conversation: Conversation, tools: PaneTools | None = None) -> ChatPane:
        """A pane takes the lowest number no open pane shows and keeps it until it closes, so forks and
        closes never renumber the others (ids are never reused: late engine events name a pane by id)."""
        self._pane_count += 1
        pane = ChatPane(conversation, self.context, id=f"pane-{self._pane_count}", tools=tools)
        number = min(set(range(1, len(self._numbers) + 2)) - set(self._numbers.values()))
        self._numbers[pane.id or ""] = number
        pane.label = str(number)
        return pane

    def _relayout(self) -> None:
        """Fit grid, dashboard and guard to the terminal; the saver records the panes open in screen order."""
        panes = self.panes
        self.saving.open = [pane.session for pane in panes]
        width, height = self.app.size
        banner = self.demo and height >= BANNER_MIN_HEIGHT  # the title bar says "demo" too
        self.set_class(not banner, "-no-banner")
        chrome = 2 + banner + bool(self.save_warning.display)  # title bar, footer, banners
        layout = plan_layout(width, height, len(panes), chrome, self.dashboard_wanted)
        self.grid.styles.grid_size_columns, self.grid.styles.grid_size_rows = layout.columns, layout.rows
        self.dashboard.set_mode(layout.dashboard)
        close = key_named(self.app, self.BINDINGS, "close_pane")
        self.too_small.update(f"{layout.too_small}\nEnlarge the window, or close a pane ({close}).")
        was_too_small = self.has_class("-too-small")
        self.set_class(layout.too_small is not None, "-too-small")
        if was_too_small and layout.too_small is None and self.focused is None:
            # hiding the panes took the focus away: give it back, so typing goes where it went before
            self.call_after_refresh(self.active_pane.focus_input)

    # ------------------------------------------------------------------ backend -> dashboard
    @work(thread=True, exclusive=True, group="monitor")
    def _monitor(self) -> None:
        """Read the backend's published snapshot a few times a second, for the dashboard's figures
        (each pane hears of its own request, phase and prefill included, from its events); never
        touches the model.

        Only a new snapshot is posted: an idle engine publishes none, so an idle app stays idle.
        """
        worker = get_current_worker()
        last = None
        while not worker.is_cancelled:
            snapshot = self.context.sessions.backend.snapshot()
            if snapshot is not None and snapshot is not last:
                self.post_message(self.Snapshotted(snapshot))
                last = snapshot
            time.sleep(self.snapshot_interval)

    def on_chat_pane_tool_wait_changed(self, message: ChatPane.ToolWaitChanged) -> None:
        message.stop()
        waits = {
            f"pane {p.label}": TOOL_WAITS[p.status.state] for p in self.panes if p.status.state in TOOL_WAITS
        }
        self.dashboard.show_tool_waits(waits)

    def on_chat_screen_snapshotted(self, message: Snapshotted) -> None:
        labels = {p.id: f"pane {p.label}" for p in self.panes}
        self.dashboard.show(message.snapshot, labels)

    # ------------------------------------------------------------------ persistence
    def _retry_saves(self) -> None:
        if self.saver.problem is not None:
            self.saver.retry()
            self._show_save_problem()

    def _show_save_problem(self) -> None:
        problem = self.saver.problem
        if bool(problem) != self.save_warning.display:
            self.save_warning.display = bool(problem)
            self._relayout()
        if problem:
            self.save_warning.update(
                f"Not saved: {problem} Retrying every {RETRY_SECONDS:.0f} s; "
                f"{key_named(self.app, PANE_KEYS, 'export')} exports a pane."
            )

    async def save_all(self) -> None:
        """On quit: every pane, with any reply still streaming kept as it stands, and its draft."""
        for pane in self.panes:
            await pane.session.settle()

    # ------------------------------------------------------------------ switching the local model
    async def stop_replies(self) -> None:
        """Before the engine is switched: every reply in flight stops, kept and marked stopped."""
        for pane in self.panes:
            await pane.session.stop_for_switch()

    async def use_backend(self, backend: Backend, demo: bool) -> None:
        """Every pane keeps its conversation on the new model. The ids they kept for the prefix cache
        are the old tokenizer's, so they are dropped, and each context meter is measured again."""
        self.context.sessions.backend = backend
        self.demo = demo
        self._relayout()  # the demo banner comes or goes
        self.title_text = backend.title
        self.query_one("#title-bar", Static).update(backend.title)
        self.dashboard.set_architecture(backend.architecture)
        for pane in self.panes:
            pane.show_model()
            await pane.session.model_switched()

    # ------------------------------------------------------------------ actions
    def on_descendant_focus(self, event: DescendantFocus) -> None:
        pane = next((a for a in event.widget.ancestors_with_self if isinstance(a, ChatPane)), None)
        if pane is not None:
            self.active_pane_id = pane.id

    def _confirmed(self, what: str, prompt: str) -> bool:
        """True on the second press within CONFIRM_SECONDS; the first only says what will happen."""
        now = time.monotonic()
        if self._confirming is not None and self._confirming[0] == what and now < self._confirming[1]:
            self._confirming = None
            return True
        self._confirming = (what, now + CONFIRM_SECONDS)
        self.notify(prompt, severity="warning", timeout=CONFIRM_SECONDS, markup=False)
        return False

    async def action_new_pane(
        self,
        conversation: Conversation | None = None,
        after: ChatPane | None = None,
        tools: PaneTools | None = None,
    ) -> None:
        if len(self.panes) >= MAX_PANES:
            self.notify(f"At most {MAX_PANES} panes fit on screen.", severity="warning")
            return
        self.minimize()  # a new pane is seen at once, beside the others
        pane = self._new_pane(conversation or Conversation(settings=replace(self.defaults)), tools)
        await self.grid.mount(pane, after=after)
        self._relayout()
        self.set_focus(pane.prompt_input)
        pane.session.save()

    async def on_chat_pane_forked(self, message: ChatPane.Forked) -> None:
        """The fork opens right after its parent (if still open), so the two answers grow side by side."""
        parent = message.pane if message.pane in self.panes else None
        await self.action_new_pane(message.fork.conversation, after=parent, tools=message.fork.tools)

    async def on_chat_pane_broadcast(self, message: ChatPane.Broadcast) -> None:
        """Send to the marked panes (else all), with the sender's attachments: every prompt is built
        first, then all are submitted at once, so the engine batches their replies. A pane still
        replying is skipped and named; if none could take it, the text and attachments go back."""
        panes = self.panes
        targets = [p for p in panes if p.marked] or panes
        ready = [p for p in targets if not p.busy]
        if skipped := [p.label for p in targets if p.busy]:
            self.notify(f"Not sent to pane {', '.join(skipped)}: still replying.", severity="warning")
        carried = message.pane.session.hand_over()  # the sender's attachments go to every pane
        if not ready:
            message.pane.prompt_input.give_back(message.text)
            message.pane.session.hold_again(carried)
            return
        if len(targets) > 1:
            for pane in ready:
                name_broadcast(pane, message.text)
        sessions = [pane.session for pane in ready]
        taken = [session for session in sessions if await session.take_message(message.text, carried)]
        prepared = await asyncio.gather(*(session.prepare_turn() for session in taken))
        for session, turn in zip(taken, prepared, strict=True):
            if turn is not None:
                session.start_turn(turn)

    async def action_close_pane(self) -> None:
        if len(self.panes) == 1:
            clear = key_named(self.app, PANE_KEYS, "clear")
            self.notify(f"The last pane stays open: {clear} clears it.", severity="warning")
            return
        pane = self.active_pane
        key_name = key_named(self.app, self.BINDINGS, "close_pane")
        if pane.busy:
            ask = (
                f"Pane {pane.label} is still replying. {key_name} again closes it (the reply so far is kept)."
            )
        elif pane.draft.strip():
            ask = f"Pane {pane.label} has a message not sent. {key_name} again closes it (History keeps it)."
        else:
            ask = None
        if ask is not None and not self._confirmed(f"close {pane.id}", ask):
            return
        index = self.panes.index(pane)
        await pane.session.settle()
        if self.maximized is pane:
            self.minimize()
        await pane.remove()
        self._numbers.pop(pane.id or "", None)
        self._relayout()
        pane.session.save()  # its row is no longer among the open ones
        self.set_focus(self.panes[min(index, len(self.panes) - 1)].prompt_input)

    def action_toggle_dashboard(self) -> None:
        self.dashboard_wanted = not self.dashboard_wanted
        self._relayout()

    def action_focus_pane(self, step: int) -> None:
        """From the pane that holds focus now, not from the last focus event: those queue behind
        token and key messages, so under load they would name a pane the user already left.
        `set_focus` (not `Widget.focus`, which defers) so keys typed right after Tab land in the
        new pane. While a pane is zoomed, the zoom moves with the focus."""
        panes = self.panes
        target = panes[(panes.index(self.active_pane) + step) % len(panes)]
        self.active_pane_id = target.id
        if isinstance(self.maximized, ChatPane):
            self.maximize(target, container=False)
        self.set_focus(target.prompt_input)

    @work(thread=True, exclusive=True, group="mcp-servers")
    def action_mcp_servers(self) -> None:
        """On a thread: the first use of the ToolBox imports the MCP SDK, which takes seconds."""
        from app.ui.screens.mcp_servers import McpServersScreen

        app = self.app
        toolbox = app.toolbox  # type: ignore[attr-defined]
        app.call_from_thread(app.push_screen, McpServersScreen(toolbox, app.tools_note))  # type: ignore[attr-defined]

    def action_zoom(self) -> None:
        """The active pane alone on the screen (Textual's maximize), or every pane again."""
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.active_pane, container=False)

    def action_history(self) -> None:
        open_ids = {p.conversation.id for p in self.panes}
        self.app.push_screen(HistoryScreen(self.saver, open_ids, self._release), self._reopen)

    async def _reopen(self, conversation_id: int | None) -> None:
        self._adopt_names()
        if conversation_id is None:
            return
        pane = next((p for p in self.panes if p.conversation.id == conversation_id), None)
        if pane is not None:
            self.set_focus(pane.prompt_input)
        elif (conversation := self.saver.store.load(conversation_id)) is None:
            return
        elif (empty := self._empty_pane()) is not None:
            await empty.session.open(conversation)
            self.set_focus(empty.prompt_input)
        else:
            await self.action_new_pane(conversation)

    def _empty_pane(self) -> ChatPane | None:
        """Where a reopened conversation goes before a new pane is opened: the active pane if it is
        empty, else the first empty one."""
        return next((p for p in [self.active_pane, *self.panes] if p.session.empty), None)

    async def _release(self, conversation_id: int) -> None:
        """History is deleting a conversation open in a pane: stop its reply and give the pane a new
        conversation first, so no later save writes the deleted row back."""
        for pane in self.panes:
            if pane.conversation.id == conversation_id:
                await pane.session.settle()
                await pane.session.open(Conversation(settings=replace(pane.conversation.settings)))

    def _adopt_names(self) -> None:
        """A rename in History of a conversation open in a pane: the pane takes the new name (its next
        save would otherwise write the old one back)."""
        for pane in self.panes:
            if pane.conversation.id is not None:
                saved = self.saver.store.load(pane.conversation.id)
                if saved is not None and saved.name != pane.conversation.name:
                    pane.conversation.name = saved.name
                    pane.relabel(pane.label, force=True)

    def system_commands(self) -> Iterable[SystemCommand]:
        """Every binding of this screen and of the panes (acting on the active pane), for the palette."""
        yield from palette_commands(self.app, self.BINDINGS, self.run_action)
        yield from palette_commands(self.app, ChatPane.BINDINGS, self._run_pane_action)

    async def _run_pane_action(self, action: str) -> None:
        await self.active_pane.run_action(action)

    def on_resize(self, event: Resize) -> None:
        self._relayout()


def name_broadcast(pane: ChatPane, text: str) -> None:
    """The chats a broadcast starts all open with the same question: each is named after its pane and
    sampling, so History tells them apart ("pane 2 · T 0.7 · model · question"). A chat that had
    messages (or a name) before keeps its title."""
    conversation = pane.conversation
    if conversation.name or conversation.messages:
        return
    settings = conversation.settings
    sampling = f"T {settings.temperature:g}"
    sampling += f" top-p {settings.top_p:g}" if settings.top_p < 1 else ""
    sampling += f" top-k {settings.top_k}" if settings.top_k else ""
    sampling += f" min-p {settings.min_p:g}" if settings.min_p else ""
    parts = [f"pane {pane.label}", sampling, settings.model, " ".join(text.split())]
    conversation.name = " · ".join(part for part in parts if part)
