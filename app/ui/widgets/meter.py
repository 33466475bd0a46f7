"""A text bar meter, shared by the engine's and a server's dashboard."""

from __future__ import annotations

from rich.text import Text

BAR_WIDTH = 8


def meter(used: int, total: int, width: int = BAR_WIDTH) -> Text:
    """A bar of `width` cells, filled in proportion; a partly used resource shows at least one cell."""
    filled = 0 if total <= 0 else min(width, round(width * used / total))
    if used and not filled:
        filled = 1
    return Text.assemble(("█" * filled, "bold green"), ("░" * (width - filled), "dim"))
