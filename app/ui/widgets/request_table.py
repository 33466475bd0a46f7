"""The dashboard's request table: a header and a few rows of text columns, drawn from cached lines.

Textual's DataTable rendered every row's cells and styles again at each dashboard snapshot (four a
second, the token counts change in every one): with 8 server panes streaming, the dashboard took
~7% of the UI thread (bench.key_latency --server). This table draws its few lines once per change
and hands them out; the columns are as wide as their widest cell, as DataTable's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

Row = tuple[str, ...]


class RequestTable(Widget, can_focus=False):
    """Column headings over rows of plain cells, every other row striped."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"request-table--header", "request-table--stripe"}
    DEFAULT_CSS = """
    RequestTable {
        background: $surface;
        color: $foreground;
        & > .request-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .request-table--stripe {
            background: $surface-lighten-1 50%;
        }
        &:dark > .request-table--stripe {
            background: $surface-darken-1 40%;
        }
    }
    """

    def __init__(self, columns: Sequence[str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns: Row = tuple(columns)
        self.rows: list[Row] = []
        self._lines: list[Strip] = []
        self._drawn_width: int | None = None  # the width the lines were drawn at (None: draw again)

    def show(self, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """Show these rows under these headings (each row as long as the headings); a repaint only
        when they changed, never a layout (the table's height is fixed by its CSS)."""
        columns, new_rows = tuple(columns), [tuple(row) for row in rows]
        if any(len(row) != len(columns) for row in new_rows):
            raise ValueError(f"every row of the table needs {len(columns)} cells, one per heading")
        if columns == self.columns and new_rows == self.rows:
            return
        self.columns, self.rows = columns, new_rows
        self._drawn_width = None
        self.refresh()

    def notify_style_update(self) -> None:
        self._drawn_width = None  # its styles changed (a theme switch re-applies every node's)
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._drawn_width:
            self._lines, self._drawn_width = self._draw(width), width
        return self._lines[y] if y < len(self._lines) else Strip.blank(width, self.rich_style)

    def _draw(self, width: int) -> list[Strip]:
        widths = [max(map(cell_len, column)) for column in zip(self.columns, *self.rows, strict=True)]
        base = self.rich_style
        header = base + self.get_component_rich_style("request-table--header")
        stripe = base + self.get_component_rich_style("request-table--stripe")
        lines = [_line(self.columns, widths, header, base, width)]
        for n, row in enumerate(self.rows):
            lines.append(_line(row, widths, stripe if n % 2 else base, base, width))
        return lines


def _line(cells: Row, widths: list[int], style: Style, base: Style, width: int) -> Strip:
    """One row: each cell padded to its column with a space either side, cropped to `width`."""
    padded = (f" {set_cell_size(cell, cell_width)} " for cell, cell_width in zip(cells, widths, strict=True))
    text = "".join(padded)
    text = set_cell_size(text, min(width, cell_len(text)))
    rest = width - cell_len(text)
    return Strip([Segment(text, style), Segment(" " * rest, base)], width)
