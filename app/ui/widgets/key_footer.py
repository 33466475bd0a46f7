"""The footer: keys in order of importance, with quit and the palette always in view.

Textual's Footer lists the focused widget's keys first and the app's last, so a narrow
terminal scrolls `^q Quit` out of sight while a rarely used key stays. This footer orders the
shown keys by `FOOTER_ORDER` (what a newcomer needs first), so a narrow terminal drops the least
needed ones, and keeps quit and the command palette (every key, searchable) on the right.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalGroup
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Binding ids, most needed first; ids not listed keep their order after these.
FOOTER_ORDER = (
    "stop",
    "new_pane",
    "next_pane",
    "settings",
    "history",
    "fork",
    "regenerate",
    "edit_last",
    "copy",
    "close_pane",
    "clear",
    "toggle_dashboard",
    "copy_code",
    "export",
    "toggle_thinking",
    "attach_file",
    "pick_model",
)
Entry = tuple[Binding, bool, str]  # a key to show: its binding, whether it is enabled, its tooltip
PINNED = ("quit",)  # kept on the right, beside the palette key
PALETTE_LABEL = "All keys"  # the palette lists every command with its key


class KeyFooter(Footer):
    """A compact footer that keeps quit and the palette visible at any width."""

    DEFAULT_CSS = """
    KeyFooter #footer-keys {
        width: 1fr;
        height: 1;
        overflow: hidden;
    }
    KeyFooter #footer-pinned {
        width: auto;
        height: 1;
    }
    """

    # False: compose again at every change of the bindings, as Textual's Footer does (the bench's "before").
    skips_unchanged: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)
        self.laid_out_width = 0  # the width the shown keys were chosen for
        self._composed: list[Entry] | None = None  # the keys composed, in order (None: none yet)
        self._keys: dict[str, FooterKey] = {}  # the keys composed, by action

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self.laid_out_width = self.size.width
        self._composed = ranked = self._ranked()
        self._keys = {}
        pinned = [self._key(*e, classes="-pinned") for e in ranked if _is_palette(e[0])]
        pinned += [self._key(*e, classes="-pinned") for e in ranked if e[0].id in PINNED]  # quit outermost
        room = self.size.width - sum(_width(key) for key in pinned)
        with HorizontalGroup(id="footer-keys"):
            for entry in ranked:
                if entry[0].show and not _pinned(entry[0]):
                    key = self._key(*entry)
                    room -= _width(key)
                    if room < 0:
                        break  # whole keys only: the palette lists the rest
                    yield key
        with HorizontalGroup(id="footer-pinned"):
            yield from pinned

    async def recompose(self) -> None:
        """Compose again only when other keys are shown or the width changed; a key only enabled
        or disabled is updated in place. A focus move publishes the bindings' change twice, and
        each recompose removed and mounted ~20 keys over a few screen layouts: with 8 panes
        streaming, the first keys typed after moving to a pane waited 140-210 ms behind them."""
        if not self.is_attached or self._pruning:  # its screen went (a modal closed) before this ran
            return
        ranked = self._ranked()
        if (
            self.skips_unchanged
            and self._composed is not None
            and self.size.width == self.laid_out_width
            and [e[0] for e in ranked] == [e[0] for e in self._composed]
        ):
            for binding, enabled, tooltip in ranked:
                if key := self._keys.get(binding.action):
                    key.disabled = not enabled
                    key.tooltip = tooltip or binding.description
            self._composed = ranked
            return
        await super().recompose()

    def _ranked(self) -> list[Entry]:
        """The keys to show (binding, enabled, tooltip), most needed first."""
        first: dict[str, Entry] = {}
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show or _pinned(binding):
                first.setdefault(binding.action, (binding, enabled, tooltip))
        return sorted(first.values(), key=lambda entry: _rank(entry[0]))

    def on_resize(self) -> None:
        if self.size.width != self.laid_out_width:
            self.call_after_refresh(self.recompose)

    def _key(self, binding: Binding, enabled: bool, tooltip: str, classes: str = "") -> FooterKey:
        label = PALETTE_LABEL if _is_palette(binding) else binding.description
        self._keys[binding.action] = key = FooterKey(
            binding.key,
            self.app.get_key_display(binding),
            label,
            binding.action,
            disabled=not enabled,
            tooltip=tooltip or binding.description,
            classes=classes,
        )
        return key.data_bind(compact=Footer.compact)


def _width(key: FooterKey) -> int:
    """Cells a compact key takes: its key, a space, its label and a one-cell margin."""
    return len(key.key_display) + 1 + len(key.description) + 1


def _rank(binding: Binding) -> int:
    return FOOTER_ORDER.index(binding.id) if binding.id in FOOTER_ORDER else len(FOOTER_ORDER)


def _is_palette(binding: Binding) -> bool:
    return binding.action == "command_palette"


def _pinned(binding: Binding) -> bool:
    return binding.id in PINNED or _is_palette(binding)
