"""When streaming panes may redraw: together on one beat, and not while the user is typing.

Each redraw of a streaming reply grows a transcript, which makes Textual lay out and compose
the whole screen again; with 8 panes streaming and each drawing on its own 30 fps timer, that
work filled the UI thread and a keystroke waited behind it (p50 ~0.5 s, p95 over 1 s, measured
by bench.key_latency on a 2-core machine). So the panes draw on a shared beat (one layout for
all of them), and while keys are arriving they hold their frames: a keystroke's frame then
redraws only the input. A held stream still shows its text at least every MAX_HOLD_SECONDS,
and everything held arrives at the next frame (the inbox keeps it), so nothing is lost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

# Streaming panes draw at most this often, all on the same beat (~15 frames a second).
STREAM_FRAME_SECONDS = 1 / 15
# A key pressed less than this long ago holds the streams' frames: typing is still going on.
TYPING_HOLD_SECONDS = 0.3
# However long the typing, a stream shows its new text at least this often.
MAX_HOLD_SECONDS = 1.0


class FramePacer:
    """Shared by every pane of a screen; told about keystrokes, asked when a stream may draw."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._typed_at = -math.inf

    def key_pressed(self) -> None:
        self._typed_at = self._clock()

    def until_frame(self, drawn_at: float) -> float:
        """Seconds until a pane that last drew at `drawn_at` may draw: the next shared beat at least
        one beat after its last frame, or later while the user types."""
        now = self._clock()
        earliest = max(now, drawn_at + STREAM_FRAME_SECONDS)
        beat = math.ceil(earliest / STREAM_FRAME_SECONDS) * STREAM_FRAME_SECONDS
        return max(beat - now, self.hold(drawn_at))

    def hold(self, drawn_at: float) -> float:
        """Seconds a frame due now must still wait for the typing to pause (0: draw now)."""
        until = min(self._typed_at + TYPING_HOLD_SECONDS, drawn_at + MAX_HOLD_SECONDS)
        return max(0.0, until - self._clock())
