"""A one-line tokens/s history drawn with block characters, as wide as it is given."""

from __future__ import annotations

from collections.abc import Sequence

from textual.reactive import reactive
from textual.widget import Widget

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int) -> str:
    """The last `width` values scaled to their maximum, zero-padded on the left to fill the width.

    Unlike Textual's Sparkline, an all-zero history draws flat instead of full, so an idle engine
    does not look busy.
    """
    recent = list(values)[-width:] if width > 0 else []
    recent = [0.0] * (max(width, 0) - len(recent)) + recent
    top = max(recent, default=0.0)
    if top <= 0:
        return SPARKS[0] * len(recent)
    return "".join(SPARKS[round(v / top * (len(SPARKS) - 1))] for v in recent)


class Throughput(Widget):
    """Rendered at draw time, so it always fits its current width."""

    values: reactive[tuple[float, ...]] = reactive(())

    def render(self) -> str:
        return sparkline(self.values, self.size.width)
