"""How tall a view that a stream appends to is laid out: its rows rounded up to SLACK_ROWS.

A view one row taller lays out the whole screen and scrolls its transcript, which redraws every
line of the pane; with blank rows under the text to grow into, most rows a token adds land in rows
already laid out and redraw only themselves (one layout per SLACK_ROWS rows instead of per row).
The rows fit the text again when the stream ends.
"""

from __future__ import annotations

SLACK_ROWS = 4


def laid_out_rows(rows: int, streaming: bool) -> int:
    """The height to lay out for `rows` of text: rounded up to SLACK_ROWS while streaming."""
    return rows + (-rows) % SLACK_ROWS if streaming else rows
