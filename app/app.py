"""The lfm-chat Textual application: loading, then the chat screen, or a clear error."""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from app.core.conversation import Conversation
from app.core.options import MAX_PANES, AppOptions
from app.store.database import Store
from app.store.errors import StoreError
from app.store.persistence import Saver
from app.store.rows import repairs_notice
from app.ui import paste
from app.ui.keys import key, load_keymap, palette_commands
from app.ui.patches import instant_keys
from app.ui.screens.error import ErrorScreen, what_to_try
from app.ui.screens.loading import LoadingScreen

if TYPE_CHECKING:  # imports torch-based widgets: loaded after the loading screen is drawn
    from app.backend.base import Backend
    from app.backend.model_choices import ModelChoice
    from app.tools.toolbox import ToolBox
    from app.ui.screens.chat import ChatScreen
    from app.ui.widgets.chat_pane import ChatPane


THEME_KEY = "theme"
REPLACED_COMMANDS = frozenset({"Quit", "Maximize"})
QUIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # quit as ctrl+q does: saved, terminal restored


class LfmChatApp(App[None]):
    """Owns the store and the backend; screens do the rest."""

    CSS_PATH = "lfm_chat.tcss"
    TITLE = "lfm-chat"
    BINDINGS: ClassVar[list[BindingType]] = [
        key("ctrl+q", "quit", "Quit", "Save everything and quit"),
    ]

    def __init__(self, options: AppOptions, store: Store | None = None) -> None:
        """`store`: the CLI opens it before the UI starts, so a bad --data-dir is a one-line error;
        without one the app opens `options.store_path` itself and shows what went wrong."""
        super().__init__()
        paste.install()
        instant_keys.install()
        self.options = options
        self.store = store
        self.backend: Backend | None = None
        self.chat_screen: ChatScreen | None = None
        self.user_keys: dict[str, str] = {}  # binding id -> keys, as keymap.json set them
        self._switching: AppOptions | None = None  # the options of the model being switched to
        self._toolbox: ToolBox | None = None
        self._toolbox_lock = threading.Lock()
        self.tools_note = ""  # where the MCP servers come from, or why a file was not read
        self._signalled = False  # a SIGTERM or SIGHUP came: quitting

    def on_mount(self) -> None:
        if self.store is None:
            try:
                self.store = Store(self.options.store_path)
            except StoreError as exc:
                self.push_screen(ErrorScreen(str(exc), what_to_try(self.options)))
                return
        if (moved := self.store.recovered_from) is not None:
            self.notify(
                f"The conversation store was corrupt: it was moved to {moved} and a new one started.",
                severity="error",
                timeout=30,
                markup=False,
            )
        if (theme := self.store.get_state(THEME_KEY)) in self.available_themes:
            self.theme = theme
        self.push_screen(LoadingScreen(self.options))
        self.call_after_refresh(self._load_keymap)  # it imports the chat screen's keys: after the first frame
        self._catch_quit_signals()

    def _catch_quit_signals(self) -> None:
        """SIGTERM and SIGHUP (a closed terminal, a `kill`) quit as ctrl+q does: everything saved,
        then Textual's driver restores the terminal (alternate screen and mouse reporting off).
        Python's default for both ends the process at once, leaving the terminal unusable."""
        loop = asyncio.get_running_loop()
        for signal_number in QUIT_SIGNALS:
            loop.add_signal_handler(signal_number, self._quit_signalled)

    def _quit_signalled(self) -> None:
        """The first signal saves and quits; a second one quits without waiting on the save."""
        if self._signalled:
            self.exit()
            return
        self._signalled = True
        self.call_next(self.action_quit)

    def watch_theme(self, theme: str) -> None:
        """Remember the theme picked in the palette for the next launch."""
        if self.store is not None and self.store.get_state(THEME_KEY) != theme:
            Saver(self.store).set_state(THEME_KEY, theme)

    def _load_keymap(self) -> None:
        """Users remap keys by binding id, e.g. {"new_pane": "f2"}, in keymap.json in the data dir;
        what cannot be done is skipped and named in one notice."""
        path = self.options.keymap_path
        parsed = load_keymap(path, self._key_screens())
        if parsed.problem is not None:
            self.notify(f"Ignoring {path}: {parsed.problem}.", severity="warning", timeout=15, markup=False)
        elif parsed.skipped:
            skipped = "; ".join(parsed.skipped)
            self.notify(f"{path}: skipped {skipped}.", severity="warning", timeout=15, markup=False)
        self.user_keys = parsed.keys
        self.set_keymap(parsed.keys)

    def _key_screens(self) -> list[list[BindingType]]:
        """The bindings active together, screen by screen: a key may do one thing in each."""
        from app.ui.screens.chat import ChatScreen
        from app.ui.screens.history import HistoryScreen
        from app.ui.screens.settings import SettingsScreen
        from app.ui.widgets.chat_pane import ChatPane

        screens = (ChatScreen, HistoryScreen, SettingsScreen, ErrorScreen, LoadingScreen)
        panes = {ChatScreen: ChatPane.BINDINGS}
        return [[*self.BINDINGS, *screen.BINDINGS, *panes.get(screen, [])] for screen in screens]

    def get_key_display(self, binding: Binding) -> str:
        """The key the user's keymap put in force, wherever a key is named: footer, palette, notices;
        a binding with several keys shows them all ("delete/^d")."""
        keys = self.user_keys.get(binding.id or "", binding.key)
        if keys == binding.key and "," not in keys:
            return super().get_key_display(binding)
        display = super().get_key_display  # (a bare super() cannot run inside the generator)
        return "/".join(display(binding.with_key(k.strip())) for k in keys.split(","))

    async def on_loading_screen_loaded(self, message: LoadingScreen.Loaded) -> None:
        from app.ui.screens.chat import ChatScreen  # imported by the loader thread (see TYPE_CHECKING above)

        assert self.store is not None
        typed_ahead = self.screen.typed_ahead.text if isinstance(self.screen, LoadingScreen) else ""
        if self.chat_screen is not None:  # a model switch, not the launch
            await self._switched(message.backend)
            self.chat_screen.take_typed_ahead(typed_ahead)
            return
        backend = self.backend = message.backend
        self._remember_model(self.options)
        conversations = self.store.open_conversations()[:MAX_PANES]
        if self.store.repairs:
            self.notify(repairs_notice(self.store.repairs), severity="warning", timeout=20, markup=False)
        missing = max(0, self.options.panes - len(conversations))
        conversations += [Conversation(settings=replace(self.options.chat)) for _ in range(missing)]
        self.chat_screen = ChatScreen(
            backend,
            Saver(self.store),
            conversations,
            self.options.chat,
            files_dir=self.options.data_dir,
            title=backend.title,
            demo=self.options.demo,
            snapshot_interval=self.options.snapshot_interval,
            typed_ahead=typed_ahead,
        )
        self.switch_screen(self.chat_screen)
        if backend.warning:
            self.notify(backend.warning, severity="warning", timeout=20)
        if self.options.piped is not None:
            self.call_after_refresh(self._hold_piped)

    async def _hold_piped(self) -> None:
        """What was piped into `lfm-chat` waits in the first pane for the message it goes with."""
        piped, self.options.piped = self.options.piped, None
        if piped is not None and self.chat_screen is not None:
            await self.chat_screen.panes[0].session.attach(piped)

    def on_loading_screen_failed(self, message: LoadingScreen.Failed) -> None:
        if self.chat_screen is None:
            self.switch_screen(ErrorScreen(message.reason, what_to_try(self.options)))
            return
        self.pop_screen()  # the switch failed: the old model never stopped running
        old = self.backend.model_name if self.backend else self.options.model_label
        self.notify(
            f"Could not switch model, still running {old}: {message.reason}",
            severity="error",
            timeout=30,
            markup=False,
        )

    # ------------------------------------------------------------------ switching model
    def on_chat_pane_model_wanted(self, message: ChatPane.ModelWanted) -> None:
        """A server: the pane picks its own model from /v1/models. Local: one engine for all panes."""
        from app.backend.model_choices import RECENT_MODELS_KEY, local_choices, server_choices
        from app.ui.screens.model_picker import ModelPicker

        backend, pane = self.backend, message.pane
        if backend is None or self.store is None:
            return
        if backend.per_pane_model:
            listing = partial(server_choices, backend)
            picker = ModelPicker(listing, pane.model, f"pane {pane.label}")
            self.push_screen(picker, partial(self._pane_model, pane))
        else:
            listing = partial(local_choices, self.store.get_state(RECENT_MODELS_KEY))
            self.push_screen(ModelPicker(listing, backend.model_name, "all panes"), self._switch)

    def _pane_model(self, pane: ChatPane, choice: ModelChoice | None) -> None:
        if choice is not None and choice.model_id:
            pane.use_model(choice.model_id)

    async def _switch(self, choice: ModelChoice | None) -> None:
        """Stop the replies in flight, then load the chosen checkpoint beside the old one, with the
        loading screen's progress; the old engine goes only once the new one runs."""
        if choice is None or choice.source is None or self.chat_screen is None:
            return
        if self.backend is not None and choice.label == self.backend.model_name:
            self.notify(f"{choice.label} is the model running now.", markup=False)
            return
        self._switching = self.options.for_model(choice.source)
        await self.chat_screen.stop_replies()
        self.push_screen(LoadingScreen(self._switching))

    async def _switched(self, backend: Backend) -> None:
        """The new engine runs: the panes take it, the old one's worker stops and its memory goes."""
        assert self.chat_screen is not None and self._switching is not None
        old, self.backend, self.options = self.backend, backend, self._switching
        self.pop_screen()
        self.chat_screen.defaults = self.options.chat  # new panes take the new card's sampling
        await self.chat_screen.use_backend(backend, self.options.demo)
        self._remember_model(self.options)
        if old is not None:  # its replies were stopped: closing only joins the worker thread
            await asyncio.to_thread(old.close)
            del old
            gc.collect()  # the engine's weights and caches go now, not at some later collection
        self.notify(f"Now running {backend.model_name}.", markup=False)

    def _remember_model(self, options: AppOptions) -> None:
        """A checkpoint folder that loaded is offered by the picker next time."""
        from app.backend.model_choices import RECENT_MODELS_KEY, with_recent

        if self.store is None or options.server is not None or options.demo:
            return
        if (row := with_recent(self.store.get_state(RECENT_MODELS_KEY), options.model)) is not None:
            Saver(self.store).set_state(RECENT_MODELS_KEY, row)

    async def action_quit(self) -> None:
        """Save every pane (a reply in flight as far as it got), then leave."""
        if self.chat_screen is not None:
            await self.chat_screen.save_all()
        self.exit()

    @property
    def toolbox(self) -> ToolBox:
        """The MCP servers of mcp.json and --mcp FILE, shared by every pane. Made on first use, as the
        SDK takes seconds to import: the first call belongs on a thread."""
        with self._toolbox_lock:
            if self._toolbox is None:
                from app.tools.config import app_servers
                from app.tools.toolbox import ToolBox

                servers, self.tools_note = app_servers(self.options.data_dir, self.options.mcp_file)
                self._toolbox = ToolBox(servers)
            return self._toolbox

    def on_unmount(self) -> None:
        if self._toolbox is not None:
            self._toolbox.close()  # every MCP server stops with the app
        loop = asyncio.get_running_loop()
        for signal_number in QUIT_SIGNALS:
            loop.remove_signal_handler(signal_number)
        if self.backend is not None:
            self.backend.close()
        if self.store is not None:
            self.store.close()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands without its Quit (ours saves first) and Maximize (it hatches the input
        box and hides the other panes' streams); ours come from the key bindings."""
        yield from (c for c in super().get_system_commands(screen) if c.title not in REPLACED_COMMANDS)
        yield from palette_commands(self, self.BINDINGS, self.run_action)
        if self.chat_screen is not None and screen is self.chat_screen:
            yield from self.chat_screen.system_commands()
