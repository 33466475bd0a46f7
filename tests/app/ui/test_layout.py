"""How the chat screen divides small terminals: panes keep their input, the dashboard gives way first."""

from __future__ import annotations

import pytest

from app.ui.layout import COMFORT_TRANSCRIPT_ROWS, MIN_TRANSCRIPT_ROWS, plan_layout

CHROME = 2  # title bar and footer


@pytest.mark.parametrize(
    ("size", "panes", "dashboard"),
    [
        ((120, 40), 4, "full"),
        ((80, 24), 4, "line"),
        ((60, 20), 4, "line"),
        ((45, 14), 4, "hidden"),
        ((80, 24), 9, "line"),
        ((80, 24), 1, "full"),
    ],
)
def test_the_dashboard_folds_before_panes_lose_rows(
    size: tuple[int, int], panes: int, dashboard: str
) -> None:
    layout = plan_layout(*size, panes, CHROME, dashboard_wanted=True)
    assert layout.too_small is None
    assert layout.dashboard == dashboard
    rows = layout.transcript_rows(size[1], CHROME)
    assert rows >= (COMFORT_TRANSCRIPT_ROWS if dashboard == "full" else MIN_TRANSCRIPT_ROWS)


def test_80x24_with_four_panes_keeps_five_transcript_rows_each() -> None:
    layout = plan_layout(80, 24, 4, CHROME + 1, dashboard_wanted=True)  # + the demo banner
    assert layout.transcript_rows(24, CHROME + 1) >= 5


@pytest.mark.parametrize(("size", "panes"), [((40, 12), 4), ((45, 14), 9), ((30, 30), 4), ((200, 7), 1)])
def test_too_small_names_what_is_needed(size: tuple[int, int], panes: int) -> None:
    layout = plan_layout(*size, panes, CHROME, dashboard_wanted=True)
    assert layout.too_small is not None
    assert f"{size[0]}×{size[1]}" in layout.too_small


def test_a_hidden_dashboard_stays_hidden_when_there_is_room() -> None:
    assert plan_layout(200, 60, 1, CHROME, dashboard_wanted=False).dashboard == "hidden"


def test_no_panes_is_planned_without_dividing_by_zero() -> None:
    """A save problem shown while the last pane closes relays out a screen with no panes."""
    layout = plan_layout(120, 40, 0, 3, True)
    assert (layout.columns, layout.rows, layout.too_small) == (1, 1, None)
