"""The dashboard's request table: columns as wide as their widest cell, cropped to the widget, and
a row that does not match the headings refused where it is given, not when it is drawn."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from app.ui.widgets.request_table import RequestTable

HEADINGS = ("pane", "phase", "tokens", "tok/s")


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield RequestTable(HEADINGS, id="table")


def drawn(table: RequestTable) -> list[str]:
    return [table.render_line(y).text for y in range(len(table.rows) + 1)]


async def test_columns_line_up_and_rows_follow_their_updates() -> None:
    async with Host().run_test(size=(60, 8)) as pilot:
        table = pilot.app.query_one(RequestTable)
        table.show(HEADINGS, [("pane 1", "decode", "12/512", "31"), ("pane 10", "prefill", "0/4096", "")])
        await pilot.pause()
        lines = drawn(table)
        assert all(len(line) == table.size.width for line in lines)
        starts = [line.index(word) for line, word in zip(lines, ("phase", "decode", "prefill"), strict=True)]
        assert len(set(starts)) == 1  # "pane 10" widened the first column for every row
        table.show(HEADINGS, [("pane 1", "decode", "13/512", "32")])
        await pilot.pause()
        assert "13/512" in drawn(table)[1] and len(table.rows) == 1


async def test_a_narrow_table_crops_its_rows() -> None:
    async with Host().run_test(size=(20, 8)) as pilot:
        table = pilot.app.query_one(RequestTable)
        table.show(HEADINGS, [("pane 1", "decode", "12/512", "31")])
        await pilot.pause()
        assert all(len(line) == 20 for line in drawn(table))


async def test_a_row_without_a_cell_per_heading_is_refused() -> None:
    async with Host().run_test(size=(60, 8)) as pilot:
        table = pilot.app.query_one(RequestTable)
        with pytest.raises(ValueError, match="4 cells"):
            table.show(HEADINGS, [("pane 1", "decode")])
