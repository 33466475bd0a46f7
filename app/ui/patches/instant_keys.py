"""Editing keys act when they arrive, in order with the characters typed around them.

Textual runs a widget's own non-priority bindings (Backspace, Delete, ←/→, Home...) only after
the key has bubbled through every ancestor's message queue up to the App, while a typed
character is inserted as soon as the widget sees it. Keys that arrive in one burst (fast typing,
a terminal sending several at once) therefore run out of order: "gh⌫ij" became "ghi", because
Backspace ran after "ij" had been inserted and took the "j". Running the focused box's own
binding as it arrives keeps the order; it is the binding Textual would pick anyway (the focused
widget's bindings come first in the chain, and priority ones were already tried by the App).
This works around Textual issue #6605 (the fix proposed upstream, pull request #6631, does the same
inside Input and TextArea); drop it once a Textual release carries that fix.
"""

from __future__ import annotations

from textual import command, events
from textual.actions import parse
from textual.widget import Widget
from textual.widgets import Input


async def act_now(widget: Widget, event: events.Key) -> bool:
    """Run `widget`'s own binding for `event` now; False if it has none (the key goes on as usual)."""
    bindings = widget._bindings.key_to_bindings.get(event.key, [])
    binding = next((b for b in bindings if not b.priority), None)
    if binding is None or event.is_printable:
        return False
    _, name, parameters = parse(binding.action)
    if not widget.check_action(name, parameters):
        return False  # disabled here: the key goes on to the bindings further up, as Textual would
    event.stop()
    event.prevent_default()
    await widget.run_action(binding.action)
    return True


class InstantKeys:
    """Mixin for a text box, listed before its Textual class: its editing keys run on arrival.
    (Not a Widget itself: Textual would then merge its component classes without the box's.)"""

    async def _on_key(self, event: events.Key) -> None:
        assert isinstance(self, Widget)
        if not await act_now(self, event):
            await super()._on_key(event)  # type: ignore[misc]


class InstantInput(InstantKeys, Input):
    """A one-line Input whose Backspace, Delete and cursor keys keep their place among typed keys."""


class InstantCommandInput(InstantKeys, command.CommandInput):
    """The command palette's search box, with the same guarantee."""


def install() -> None:
    """Make Textual's command palette build its search box from `InstantCommandInput` (it looks the
    class up by name when it composes)."""
    command.CommandInput = InstantCommandInput  # type: ignore[misc]
