"""The lfm-chat Textual application: loading, then the chat screen, or a clear error."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from app import paste
from app.conversation import Conversation
from app.keys import key, load_keymap, palette_commands
from app.options import MAX_PANES, AppOptions
from app.persistence import Saver
from app.screens.error import ErrorScreen, what_to_try
from app.screens.loading import LoadingScreen
from app.store import Store
from app.store_errors import StoreError
from app.store_rows import repairs_notice
from app.widgets import instant_keys

if TYPE_CHECKING:  # imports torch-based widgets: loaded after the loading screen is drawn
    from app.backend.base import Backend
    from app.screens.chat import ChatScreen


THEME_KEY = "theme"
REPLACED_COMMANDS = frozenset({"Quit", "Maximize"})


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
        from app.screens.chat import ChatScreen
        from app.screens.history import HistoryScreen
        from app.screens.settings import SettingsScreen
        from app.widgets.chat_pane import ChatPane

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

    def on_loading_screen_loaded(self, message: LoadingScreen.Loaded) -> None:
        from app.screens.chat import ChatScreen  # imported by the loader thread (see TYPE_CHECKING above)

        assert self.store is not None
        backend = self.backend = message.backend
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
        )
        self.switch_screen(self.chat_screen)
        if backend.warning:
            self.notify(backend.warning, severity="warning", timeout=20)

    def on_loading_screen_failed(self, message: LoadingScreen.Failed) -> None:
        self.switch_screen(ErrorScreen(message.reason, what_to_try(self.options)))

    async def action_quit(self) -> None:
        """Save every pane (a reply in flight as far as it got), then leave."""
        if self.chat_screen is not None:
            await self.chat_screen.save_all()
        self.exit()

    def on_unmount(self) -> None:
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
