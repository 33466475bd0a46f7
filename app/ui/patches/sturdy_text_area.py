"""A TextArea that draws blank instead of crashing while its component styles are missing.

Textual 8.2's TextArea reads its ``text-area--*`` component styles on every render, but they
exist only between styling and removal: a frame drawn for a pane just closed, or for a modal
not yet styled, raised KeyError and took the whole app down (Textual issue #6528).
"""

from __future__ import annotations

from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import TextArea


class SturdyTextArea(TextArea):
    """TextArea whose frames before styling or after removal are blank lines."""

    def render_lines(self, crop: Region) -> list[Strip]:
        if not self._has_component_styles():
            return [Strip.blank(crop.width) for _ in range(crop.height)]
        return super().render_lines(crop)

    def _has_component_styles(self) -> bool:
        try:
            self.get_component_styles("text-area--gutter")
        except KeyError:
            return False
        return True
