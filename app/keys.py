"""Key bindings, declared once for the footer, the command palette and user keymaps.

Every binding gets an id (so `App.set_keymap` can remap it), a short label for the footer and
a command title for the palette. All are priority bindings: the focused TextArea would
otherwise swallow ctrl+e, ctrl+w, ctrl+y... and a non-priority key is handled only after the
keys typed behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType


def key(
    keys: str, action: str, label: str, command: str, *, show: bool = True, id: str | None = None
) -> Binding:
    return Binding(keys, action, label, show=show, priority=True, tooltip=command, id=id or action)


def palette_commands(
    app: App[Any], bindings: Iterable[BindingType], run: Callable[[str], Any]
) -> Iterator[SystemCommand]:
    """One palette command per binding, titled by its command text; the help names the key and the id
    that remaps it in keymap.json."""
    for binding in bindings:
        assert isinstance(binding, Binding)
        yield SystemCommand(
            binding.tooltip, f"{app.get_key_display(binding)} · id {binding.id}", partial(run, binding.action)
        )
