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


# ChatPane.BINDINGS: they act on the focused pane only (Esc stops only its reply).
PANE_KEYS: list[BindingType] = [
    key("escape", "stop", "Stop", "Stop this pane's reply (or leave the selection)"),
    key("ctrl+r", "regenerate", "Regen", "Regenerate the last reply"),
    key("ctrl+s", "settings", "Settings", "Settings: system prompt and sampling of this pane"),
    key("ctrl+e", "edit_last", "Edit", "Edit the last message and send it again"),
    key("ctrl+y", "copy", "Copy", "Copy the selected message or code block (else the last reply)"),
    key("ctrl+b", "copy_code", "Copy code", "Copy the last code block of the last reply"),
    key("ctrl+o", "export", "Export", "Export this conversation to a Markdown file"),
    key("ctrl+t", "toggle_thinking", "Thinking", "Show or fold the model's thinking in this pane"),
    key("f2", "pick_model", "Model", "Switch model (on a server: this pane's model)"),
    key("ctrl+l", "clear", "Clear", "Clear: a new conversation in this pane (old one kept)"),
    key(
        "ctrl+up",
        "select(-1)",
        "Select",
        "Select the previous message or code block",
        show=False,
        id="select_previous",
    ),
    key(
        "ctrl+down",
        "select(1)",
        "Select next",
        "Select the next message or code block",
        show=False,
        id="select_next",
    ),
    key("pageup", "page(-1)", "Page up", "Scroll this pane's transcript up", show=False, id="page_up"),
    key("pagedown", "page(1)", "Page down", "Scroll this pane's transcript down", show=False, id="page_down"),
    key("ctrl+home", "jump(0)", "Top", "Scroll to the first message", show=False, id="scroll_top"),
    key("ctrl+end", "jump(1)", "Bottom", "Scroll to the latest message", show=False, id="scroll_bottom"),
]
