"""A partial redraw renders only the widgets under the changed regions, and writes the terminal
exactly what Textual's own compositor writes for the same changes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from textual._compositor import Compositor
from textual.app import App, ComposeResult
from textual.containers import Grid
from textual.geometry import Region
from textual.screen import Screen
from textual.widgets import Static

from app.ui.patches.dirty_regions import DirtyRegionsCompositor

SIZE = (60, 20)


class _Tiles(Screen[None]):
    DEFAULT_CSS = """
    Grid { grid-size: 3 3; }
    Static { border: round $accent; }
    """

    def __init__(self) -> None:
        super().__init__()
        self._compositor = DirtyRegionsCompositor()

    def compose(self) -> ComposeResult:
        with Grid():
            for n in range(9):
                yield Static(f"tile {n} " * 6, id=f"tile-{n}")


class _TilesApp(App[None]):
    def on_mount(self) -> None:
        self.push_screen(_Tiles())


class _Counted:
    """Counts the real render_lines calls of each tile."""

    def __init__(self, screen: Screen[None]) -> None:
        self.calls: dict[str, int] = {}
        for tile in screen.query(Static):
            render = tile.render_lines

            def counted(crop: Region, tile: Static = tile, render=render):  # type: ignore[no-untyped-def]
                self.calls[tile.id or ""] = self.calls.get(tile.id or "", 0) + 1
                return render(crop)

            tile.render_lines = counted  # type: ignore[method-assign]


def _both(compositor: Compositor, changed: list[Region]) -> tuple[object, object]:
    compositor._dirty_regions.update(changed)
    ours = compositor.render_partial_update()
    compositor._dirty_regions.update(changed)
    stock = Compositor.render_partial_update(compositor)
    return ours, stock


async def test_two_corners_changed_render_two_tiles_not_the_screen_between() -> None:
    app = _TilesApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        compositor = screen._compositor
        first, last = screen.query_one("#tile-0").region, screen.query_one("#tile-8").region
        corners = [Region(first.x + 1, first.y + 1, 4, 1), Region(last.x + 1, last.y + 1, 4, 1)]
        counted = _Counted(screen)
        compositor._dirty_regions.update(corners)
        assert compositor.render_partial_update() is not None
        assert counted.calls == {"tile-0": 1, "tile-8": 1}  # Textual's own: all nine (the box around both)
        ours, stock = _both(compositor, corners)
        assert ours.render_segments(app.console) == stock.render_segments(app.console)  # type: ignore[union-attr]


regions = st.builds(
    Region,
    st.integers(0, SIZE[0] - 1),
    st.integers(0, SIZE[1] - 1),
    st.integers(1, SIZE[0]),
    st.integers(1, 6),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changed=st.lists(regions, min_size=1, max_size=6))
async def test_the_terminal_gets_the_same_bytes_as_from_textuals_compositor(changed: list[Region]) -> None:
    app = _TilesApp()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen_region = Region(0, 0, *SIZE)
        changed = [region.intersection(screen_region) for region in changed]
        ours, stock = _both(app.screen._compositor, [region for region in changed if region])
        if stock is None:
            assert ours is None
        else:
            assert ours.render_segments(app.console) == stock.render_segments(app.console)  # type: ignore[union-attr]
