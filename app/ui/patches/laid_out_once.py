"""A widget that only grew in a layout of the screen does not ask for a second one.

After laying out the screen Textual gives each widget its new size, and a widget whose size or
scrollable size changed sets its `virtual_size` reactive, which asks for another layout of the
whole screen (Widget._size_updated, Textual 8.2): the layout that just measured it runs again.
With panes streaming, a pane's reply grows at most of its frames, and that second layout came in
the frame after each, the one a key pressed meanwhile is drawn in: the slowest keys waited for
both (docs/PERFORMANCE.md, App, 2026-11-29 late night). A widget on screen a while, at the same
width, that only grew taller (or, scrollable, has more to scroll under a scrollbar already shown)
has nothing a second layout would change. Its first layouts, a new width and a scrollbar coming
or going still get it, as in Textual: styles and text may arrive between the first layouts, and
a new scrollbar takes room from the content.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.geometry import Size

if TYPE_CHECKING:
    from textual.widget import Widget

    _Mixin = Widget
else:
    _Mixin = object  # not a Widget subclass: first in a widget's bases, it would hide the class
    # attributes Textual sets on each widget class (focus, CSS and bindings inheritance) of the rest

# A widget skips the second layout only once it has had a size this long.
SETTLED_SECONDS = 1.0


class LaidOutOnce(_Mixin):
    """Mixed into the widgets a stream grows (the transcript, a reply and its views), first in the bases."""

    _first_sized: float | None = None  # when a layout first gave it a size

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        again = layout and not self._grown_only(size, virtual_size, container_size)
        return super()._size_updated(size, virtual_size, container_size, layout=again)

    def _grown_only(self, size: Size, virtual_size: Size, container_size: Size) -> bool:
        now = time.monotonic()
        if self._first_sized is None:
            self._first_sized = now
        before, inner = self._size, self._container_size
        if now - self._first_sized < SETTLED_SECONDS or not before.height:
            return False
        if before.width != size.width or inner.width != container_size.width:
            return False
        if self.styles.overflow_y not in ("auto", "scroll"):  # not one that scrolls (Textual's
            return True  # `is_scrollable` says yes for any container)
        return inner == container_size and self.show_vertical_scrollbar and virtual_size.height > inner.height
