"""How the chat screen divides the terminal: the pane grid, how much dashboard fits, or "too small".

Panes come first: each keeps its border, status line, input box and a few transcript rows. The
dashboard gets its full block only when the panes still have comfortable room, folds to one
line when they would not, and goes away before a pane would lose its input box. When even
that does not fit, the screen says so instead of drawing panes nobody can use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

DashboardMode = Literal["full", "line", "hidden"]

PANE_CHROME_ROWS = 4  # border top and bottom, status line, input box
MIN_TRANSCRIPT_ROWS = 2  # below this a pane cannot show a reply at all
COMFORT_TRANSCRIPT_ROWS = 5  # the full dashboard only if every pane keeps at least this many
DASHBOARD_ROWS = {"full": 7, "line": 1, "hidden": 0}
MIN_PANE_WIDTH = 20


def grid_shape(panes: int) -> tuple[int, int]:
    """Columns and rows that keep every pane visible: side by side up to three, then rows. No panes
    (the screen between closing its last one and quitting) is planned as one row."""
    columns = 1 if panes <= 1 else 2 if panes in (2, 4) else 3
    return columns, max(1, math.ceil(panes / columns))


@dataclass(frozen=True, slots=True)
class Layout:
    columns: int
    rows: int
    dashboard: DashboardMode
    too_small: str | None  # what the terminal needs at least, when it is too small

    def transcript_rows(self, height: int, chrome_rows: int) -> int:
        """Rows each pane's transcript gets (the grid splits the rest evenly, rounding down)."""
        pane_rows = (height - chrome_rows - DASHBOARD_ROWS[self.dashboard]) // self.rows
        return pane_rows - PANE_CHROME_ROWS


def plan_layout(width: int, height: int, panes: int, chrome_rows: int, dashboard_wanted: bool) -> Layout:
    """`chrome_rows`: the screen's own rows (title, banners, footer)."""
    columns, rows = grid_shape(panes)
    options: tuple[DashboardMode, ...] = ("full", "line", "hidden") if dashboard_wanted else ("hidden",)
    for mode in options:
        layout = Layout(columns, rows, mode, None)
        needed = COMFORT_TRANSCRIPT_ROWS if mode == "full" else MIN_TRANSCRIPT_ROWS
        if layout.transcript_rows(height, chrome_rows) >= needed and width // columns >= MIN_PANE_WIDTH:
            return layout
    min_height = chrome_rows + rows * (PANE_CHROME_ROWS + MIN_TRANSCRIPT_ROWS)
    need = f"at least {columns * MIN_PANE_WIDTH}×{min_height} for {panes} panes"
    return Layout(columns, rows, "hidden", f"Terminal too small: {need} (now {width}×{height}).")
