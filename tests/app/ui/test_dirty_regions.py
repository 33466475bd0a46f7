"""A partial screen update rendered by dirty region writes exactly what Textual's own writes.

The chat screen's compositor (app/ui/patches/dirty_regions.py) renders only the widgets a
partial update changes; every update of a real session (panes streaming from the engine, keys
typed into another pane, the dashboard refreshing) is checked against the bounding-box render
Textual does, byte for byte as sent to the terminal.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from textual import events
from textual._compositor import ChopsUpdate
from textual.geometry import Region

from app.app import LfmChatApp
from app.core.conversation import ChatSettings
from app.ui.patches.dirty_regions import DirtyRegionsCompositor
from tests.app.pilot_helpers import MakeOptions, chat_screen, wait_replied, wait_until

LONG = ChatSettings(temperature=0.0, max_tokens=120)


class CheckedCompositor(DirtyRegionsCompositor):
    """Renders each partial update both ways and keeps the ones that differ."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0
        self.differing: list[tuple[str, str]] = []
        self.renders = [0, 0]  # rendered by Textual's box, by dirty region
        self._console = Console(width=200, force_terminal=True, color_system="truecolor")

    def render_partial_update(self) -> ChopsUpdate | None:
        regions = [r for r in self._dirty_regions if r]
        if not regions:
            return super().render_partial_update()
        spans = list(self._regions_to_spans(regions))
        rendered = {y for y, _, _ in spans}.__contains__
        box = Region.from_union(regions).intersection(self.size.region)
        stock = ChopsUpdate(self._render_chops(box, rendered), spans, [c[1:] for c in self.cuts])
        self.renders[0] += sum(1 for _ in self._get_renders(box))
        self.renders[1] += sum(1 for _ in self._dirty_renders(regions))
        ours = super().render_partial_update()
        assert ours is not None
        expected, got = (u.render_segments(self._console) for u in (stock, ours))
        self.checked += 1
        if got != expected:
            self.differing.append((expected, got))
        return ours


async def test_partial_updates_match_textuals_while_panes_stream_and_keys_arrive(
    make_options: MakeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.ui.screens import chat

    monkeypatch.setattr(chat, "DirtyRegionsCompositor", CheckedCompositor)
    app = LfmChatApp(make_options(panes=4, chat=LONG))
    async with app.run_test(size=(150, 48)) as pilot:
        screen = await chat_screen(app, pilot)
        compositor = screen._compositor
        assert isinstance(compositor, CheckedCompositor)
        *streaming, typing = screen.panes
        for pane in streaming:
            await pane.session.send("Tell me a story.")
        typing.focus_input()
        await wait_until(pilot, lambda: app.focused is typing.prompt_input, "focus on the last pane")
        for char in "the quick brown fox jumps over the lazy dog":
            app.post_message(events.Key(char, char))
            await pilot.pause(0.02)
        await wait_replied(pilot, *streaming)
        await pilot.pause(0.2)

    assert typing.prompt_input.text == "the quick brown fox jumps over the lazy dog"
    assert compositor.checked > 20
    assert compositor.differing == []
    assert compositor.renders[1] < compositor.renders[0]  # the point: fewer widgets rendered
