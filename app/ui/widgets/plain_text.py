"""Text drawn line by line: only the rows on screen are rendered, and appending wraps only what is new.

A Static re-renders (and re-wraps) all of its text on every update, so a 900 KB code block
appended to at every token cost in proportion to the block. This widget keeps the text as
lines and their wrapped rows: an append re-wraps the last line and wraps the new ones, and
`render_line` draws a row only when the compositor asks for it (the visible ones).
"""

from __future__ import annotations

from rich.cells import chop_cells
from rich.segment import Segment
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from app.ui.patches.laid_out_once import LaidOutOnce
from app.ui.widgets.stream_slack import laid_out_rows

TAB = "    "


def wrap_line(line: str, width: int) -> list[tuple[int, int]]:
    """The (start, end) offsets of the rows `line` takes at `width` cells (hard wrapped)."""
    if not line:
        return [(0, 0)]
    if line.isascii():
        return [(i, min(i + width, len(line))) for i in range(0, len(line), width)]
    rows, start = [], 0
    for chunk in chop_cells(line, width):
        rows.append((start, start + len(chunk)))
        start += len(chunk)
    return rows


class PlainText(LaidOutOnce, Widget):
    """Read-only text, hard wrapped at the widget's width; `append` adds to its end."""

    DEFAULT_CSS = """
    PlainText {
        height: auto;
    }
    """

    def __init__(self, text: str = "", *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self._text = ""
        self._lines: list[str] = [""]  # as drawn: tabs expanded
        self._width = 0  # the width `_rows` is wrapped at (0: not wrapped yet)
        self._rows: list[tuple[int, int, int]] = []  # (line, start, end) per row on screen
        self._first_row: list[int] = []  # per wrapped line, the index of its first row
        self._streaming = False  # rows to grow into (stream_slack)
        self._laid_out = 0  # the height last given to the layout
        self.append(text)

    @property
    def source(self) -> str:
        return self._text

    def append(self, text: str) -> None:
        if not text:
            return
        self._text += text
        new = text.replace("\t", TAB).split("\n")
        last = len(self._lines) - 1
        self._lines[last] += new[0]
        self._lines.extend(new[1:])
        if self._width:
            self._unwrap_from(last)
            self._wrap_rest()
        self._redraw()

    def set_streaming(self, streaming: bool) -> None:
        """A stream appends to it (rows to grow into) or no longer does (its rows fit its text)."""
        if streaming != self._streaming:
            self._streaming = streaming
            self._redraw()

    def _redraw(self) -> None:
        height = laid_out_rows(len(self._rows), self._streaming)
        self.refresh(layout=height != self._laid_out or not self._width)

    def set_text(self, text: str) -> None:
        self._text = ""
        self._lines = [""]
        self._unwrap_from(0)
        self.append(text)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._width:
            self._width = width
            self._unwrap_from(0)
        self._wrap_rest()
        self._laid_out = laid_out_rows(len(self._rows), self._streaming)
        return self._laid_out

    def render(self) -> Content:
        """The whole text at once (what copying or a test reads); drawing goes by `render_line`."""
        return Content(self._text)

    def render_line(self, y: int) -> Strip:
        if y >= len(self._rows):
            return Strip.blank(self.size.width, self.rich_style)
        line, start, end = self._rows[y]
        return Strip([Segment(self._lines[line][start:end], self.rich_style)])

    def _unwrap_from(self, line: int) -> None:
        """Forget the rows of `line` and after (the line grew, or the width changed)."""
        if line < len(self._first_row):
            del self._rows[self._first_row[line] :]
            del self._first_row[line:]

    def _wrap_rest(self) -> None:
        if not self._width:
            return
        for index in range(len(self._first_row), len(self._lines)):
            self._first_row.append(len(self._rows))
            self._rows.extend((index, a, b) for a, b in wrap_line(self._lines[index], self._width))
