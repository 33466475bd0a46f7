"""Why lfm-chat cannot start, and what to try instead: a message, never a traceback."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Label, Static

from app.ui.widgets.key_footer import KeyFooter

if TYPE_CHECKING:
    from app.core.options import AppOptions


def what_to_try(options: AppOptions) -> str:
    """What to try next; --demo is only worth suggesting to a launch that is not already one."""
    if options.demo:
        return (
            f"The demo needs no network: it writes a tiny checkpoint to {options.cache_dir} and keeps "
            f"conversations in {options.data_dir}, so both must be writable and have some free space "
            "(`lfm-chat --data-dir DIR` keeps conversations elsewhere)."
        )
    if options.server is not None:
        return (
            f"Check that the server at {options.server} is running and reachable (curl "
            f"{options.server}/v1/models), or leave out --server to run the model on this machine."
        )
    return (
        "Try `lfm-chat --demo` to run on a tiny random model that needs no download, "
        "or `lfm-chat --model PATH` to use an LFM2 checkpoint directory on this machine."
    )


class ErrorScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,escape", "leave", "Quit", id="error_quit"),
    ]

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__()
        self.reason = reason
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box"):
            yield Label("lfm-chat could not start", id="error-title")
            yield Static(self.reason, id="error-reason", markup=False)
            yield Static(self.hint, id="error-hint", markup=False)
        yield KeyFooter()

    def action_leave(self) -> None:
        self.app.exit(return_code=1, message=f"lfm-chat: {self.reason}")
