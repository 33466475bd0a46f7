"""A partial redraw of the screen renders the widgets under the regions that changed, no others.

Textual's compositor renders, for a partial update, every widget that overlaps the rectangle
around all the changed regions (Compositor.render_partial_update, Textual 8.2). A frame that grows
one pane and shows a key in another, or updates the dashboard, spans the screen: every widget of
every pane rendered its lines again (from its cache, but for each of ~100 widgets) to write a
few rows. Only the widgets under a changed region can be written: the terminal gets the same
bytes, each changed cell still drawn by the topmost widget there.
"""

from __future__ import annotations

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region


class DirtyRegionsCompositor(Compositor):
    """The screen's compositor, narrowed to the changed regions for partial updates."""

    def render_partial_update(self) -> ChopsUpdate | None:
        changed = list(self._dirty_regions)
        if not changed:
            return super().render_partial_update()
        _ = self.cuts  # every widget's edges, computed (and cached) before the widgets are narrowed
        widgets = self.visible_widgets
        self._visible_widgets = {
            widget: (region, clip)
            for widget, (region, clip) in widgets.items()
            if _under(region.intersection(clip), changed)
        }
        try:
            return super().render_partial_update()
        finally:
            self._visible_widgets = widgets


def _under(shown: Region, changed: list[Region]) -> bool:
    return any(shown.overlaps(region) for region in changed)
