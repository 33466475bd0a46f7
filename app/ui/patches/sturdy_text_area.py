"""A TextArea that draws blank instead of crashing while its component styles are missing, and
styles its theme only when the styles it reads changed.

Textual 8.2's TextArea reads its ``text-area--*`` component styles on every render, but they
exist only between styling and removal: a frame drawn for a pane just closed, or for a modal
not yet styled, raised KeyError and took the whole app down (Textual issue #6528).

It also fills its theme from those styles (TextAreaTheme.apply_css) at every render, about half
a millisecond each, and every frame that touches a pane renders the pane's input box: ~40% of the
box's drawing while 8 panes streamed and keys arrived. The theme reads the box's style, its
component styles and the app's theme, so it is filled again only when one of them is another.
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import TextArea


class SturdyTextArea(TextArea):
    """TextArea whose frames before styling or after removal are blank lines."""

    _styled_style: Style | None = None  # the box's style the theme was last filled from
    _styled_from: tuple[Any, ...] = ()  # and the theme objects and component styles, by identity

    def render_lines(self, crop: Region) -> list[Strip]:
        if not self._has_component_styles():
            return [Strip.blank(crop.width) for _ in range(crop.height)]
        theme = self._theme
        if theme is not None:
            styled_from = (theme, self.app.current_theme, *self._component_styles.values())
            style = self.rich_style
            if style != self._styled_style or not _same(styled_from, self._styled_from):
                theme.apply_css(self)
                self._styled_style, self._styled_from = style, styled_from
        return super(TextArea, self).render_lines(crop)  # TextArea's own fills the theme every time

    def _has_component_styles(self) -> bool:
        try:
            self.get_component_styles("text-area--gutter")
        except KeyError:
            return False
        return True


def _same(these: tuple[Any, ...], those: tuple[Any, ...]) -> bool:
    return len(these) == len(those) and all(a is b for a, b in zip(these, those, strict=True))
