"""When streaming panes may redraw: together on one beat, and not while the user is typing.

Each redraw of a streaming reply grows a transcript, which makes Textual lay out and compose
the whole screen again; with 8 panes streaming and each drawing on its own 30 fps timer, that
work filled the UI thread and a keystroke waited behind it (p50 ~0.5 s, p95 over 1 s, measured
by bench.key_latency on a 2-core machine). So the panes draw on a shared beat (one layout for
all of them), and while keys are arriving they hold their frames: a keystroke's frame then
redraws only the input. A held stream still shows its text at least every MAX_HOLD_SECONDS,
and everything held arrives at the next frame (the inbox keeps it), so nothing is lost.

A beat's frame costs what its panes' Markdown and then the screen cost to lay out and compose,
which grows with the replies on it (100-600 ms with 8 server panes' Markdown replies on a 2-core
Xeon, measured by bench.key_latency --server), so a fixed 15 fps took the whole UI thread and
keys waited behind frames. The pacer therefore measures each frame (the UI thread's CPU from the
beat's first pane redraw over the screen's next FRAME_REFRESHES refreshes), spaces the next beat
so drawing streams takes at most DRAWING_SHARE of the thread (a 40 ms frame puts the next beat
~115 ms later, cheap frames keep 15 fps), and starts no new beat while a frame is not on screen.

A frame lays out and composes the whole screen whatever drew in it (100-450 ms of the UI thread
with 8 server panes, measured by bench.key_latency --server), so every pane waiting to draw draws
in it: a pane that draws pulls the waiting ones into its frame (`join`), and the longest hold
counts from the last frame, so panes held by typing run out together. Before, each held pane ran
out MAX_HOLD_SECONDS after its own last frame, and panes one beat apart drew in frames of their
own, each laying out the screen again.

While keys arrive, though, a frame of all 8 panes ended in a layout and a redraw of every pane that
moved (~126 ms and ~249 ms with 8 server panes, docs/PERFORMANCE.md "2026-11-29 (lines)"), and a
key pressed then waited for all of it. So while the user types a frame draws at most
TYPING_FRAME_PANES panes (one: each pane drawn adds its redraw to the frame a key may wait behind):
the others are `crowded` out until the screen has shown it, then draw in the next frames, keys
handled and drawn in between; the longest hold does not restart for them.

A key pressed after a pause is not typing yet, and met a frame of all 8 panes (~200 ms with 8
server panes drawing every ~0.5 s, so such a key took ~400 ms to show). So outside typing too a
frame draws only as many panes as fit FRAME_BUDGET_SECONDS at the UI thread's cost a pane in the
last frame measured; when streams are cheap that is all of them, one layout for all as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable

# Streaming panes draw at most this often, all on the same beat (~15 frames a second).
STREAM_FRAME_SECONDS = 1 / 15
# A key pressed less than this long ago holds the streams' frames: typing is still going on.
TYPING_HOLD_SECONDS = 0.3
# However long the typing, a stream shows its new text at least this often.
MAX_HOLD_SECONDS = 1.0
# Streaming frames take at most this share of the UI thread; the rest is left to keys and events.
DRAWING_SHARE = 0.35
# However costly a frame (or a stall counted into one), the next beat comes at most this long after it.
LONGEST_FRAME_GAP_SECONDS = 2.0
# A frame is measured over this many screen refreshes (when the screen has nothing left to do,
# a refresh's callbacks run at once, so a cheap frame ends its measure at once).
FRAME_REFRESHES = 3
# While keys arrive, a frame draws at most this many panes (the rest in the frames after it).
TYPING_FRAME_PANES = 1
# Otherwise a frame draws the panes its measured cost a pane fits in this much UI thread (at least one).
FRAME_BUDGET_SECONDS = 0.05


class FramePacer:
    """Shared by every pane of a screen; told about keystrokes, asked when a stream may draw."""

    # None: a fixed beat whatever frames cost (as before the frame costs were measured; the bench's "before").
    drawing_share: float | None = DRAWING_SHARE
    # False: a pane held by typing draws in a frame of its own (as before `join`; the bench's "before").
    together: bool = True
    # False: a frame draws every waiting pane while keys arrive too (as before; the bench's "before").
    spread: bool = True
    # None: a frame draws every waiting pane when no keys arrive (as before; the bench's "before").
    frame_budget: float | None = FRAME_BUDGET_SECONDS

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
        typing_frame_panes: int = TYPING_FRAME_PANES,
    ) -> None:
        self._clock = clock
        self._typing_frame_panes = typing_frame_panes
        self._cpu_clock = cpu_clock  # the UI thread's CPU: a frame's cost, not time spent waiting
        self._typed_at = -math.inf
        self._frame_began: tuple[float, float] | None = None  # (clock, cpu clock) of the frame measured
        self._next_beat_from = -math.inf  # no beat before this: the last frame's cost spaced it
        self._refreshes = 0  # of the screen, since the frame measured began
        self._last_frame = -math.inf  # when a pane last drew, whichever it was
        self._waiting: dict[Hashable, Callable[[], object]] = {}  # pane -> how to draw it now
        self._in_frame: set[Hashable] = set()  # panes drawing since the screen last refreshed
        self._frame_panes = 0  # the panes the frame measured drew
        self._pane_cost = 0.0  # UI thread seconds a pane in the last frame measured (0: none yet)

    def wait(self, pane: Hashable, draw_now: Callable[[], object]) -> None:
        """`pane` has text to draw: the next frame, whoever begins it, calls `draw_now` to draw it in."""
        self._waiting[pane] = draw_now

    def forget(self, pane: Hashable) -> None:
        """`pane` drew, or went away: no frame calls it."""
        self._waiting.pop(pane, None)

    def join(self, pane: Hashable) -> None:
        """`pane` draws now: the panes waiting for a frame draw in this one (while keys arrive,
        up to `typing_frame_panes` in all)."""
        self.forget(pane)
        self._in_frame.add(pane)
        if not self.together:
            return
        taken = list(self._waiting)[: max(0, self._room() - len(self._in_frame))]  # the longest waiting first
        if len(taken) == len(self._waiting):  # panes left out still count their hold from the frame before
            self._last_frame = self._clock()
        for waiting in taken:
            self._in_frame.add(waiting)  # counted now: its draw comes later in this frame
            self._waiting.pop(waiting)()

    def crowded(self, pane: Hashable) -> bool:
        """True: `pane`, due now, waits for the next frame: this one has its panes, or the room
        left is for panes that have waited longer (otherwise a pane whose timer fires first would
        draw every frame and a slower one never)."""
        room = self._room() - len(self._in_frame)
        return room <= 0 or (pane in self._waiting and pane not in list(self._waiting)[:room])

    def _room(self) -> int:
        """The panes the frame being drawn may hold in all."""
        if self._spreading():
            return self._typing_frame_panes
        everyone = len(self._in_frame) + len(self._waiting) + 1
        if self.frame_budget is None or self._pane_cost <= 0:
            return everyone
        return max(1, min(everyone, int(self.frame_budget / self._pane_cost)))

    def _spreading(self) -> bool:
        return self.spread and self._clock() - self._typed_at < TYPING_HOLD_SECONDS

    def frame_begun(self) -> bool:
        """A pane starts drawing; True when it is the beat's first, whose caller must report
        `frame_shown` once the screen has refreshed after it (the frame is measured up to there)."""
        if self._frame_began is not None and self._clock() - self._frame_began[0] < LONGEST_FRAME_GAP_SECONDS:
            return False  # measuring (a frame whose report never came, its pane closed, is dropped)
        self._frame_began, self._refreshes = (self._clock(), self._cpu_clock()), 0
        return True

    def frame_shown(self) -> bool:
        """The screen refreshed after the frame begun. True: report again after the next refresh
        (a frame's Markdown mounts its blocks over several refreshes, each laying out the screen);
        False: the frame is measured, and its cost spaces the next beat."""
        if self._frame_began is not None and self._refreshes == 0:
            self._frame_panes = len(self._in_frame)
        self._in_frame.clear()  # on screen: the next panes draw in a frame of their own
        if self._frame_began is None:
            return False
        self._refreshes += 1
        if self._refreshes < FRAME_REFRESHES:
            return True
        (began, cpu), self._frame_began, self._refreshes = self._frame_began, None, 0
        cost = self._cpu_clock() - cpu
        self._pane_cost = cost / max(1, self._frame_panes)
        if self.drawing_share is not None:
            gap = cost / self.drawing_share
            self._next_beat_from = began + min(gap, LONGEST_FRAME_GAP_SECONDS)
        return False

    def key_pressed(self) -> None:
        self._typed_at = self._clock()

    @property
    def typed_at(self) -> float:
        """When the last key was pressed (-inf: none yet)."""
        return self._typed_at

    def until_frame(self, drawn_at: float) -> float:
        """Seconds until a pane that last drew at `drawn_at` may draw: the next shared beat at least
        one beat after its last frame and after the gap the last frame's cost asks, or later while
        the user types."""
        now = self._clock()
        earliest = max(now, drawn_at + STREAM_FRAME_SECONDS, self._next_beat_from)
        return max(_beat_at(earliest) - now, self.hold(drawn_at))

    def hold(self, drawn_at: float) -> float:
        """Seconds a frame due now must still wait for the typing to pause or, if a costly frame
        was measured since it was planned, for the gap that frame asks (0: draw now)."""
        held_since = max(drawn_at, self._last_frame)  # panes held together run out together
        typing = min(self._typed_at + TYPING_HOLD_SECONDS, held_since + MAX_HOLD_SECONDS)
        now = self._clock()
        spaced = _beat_at(self._next_beat_from) if self._next_beat_from > now else now
        return max(0.0, typing - now, spaced - now, self._unshown(now))

    def _unshown(self, now: float) -> float:
        """A beat later than the frame measured waits one beat more while that frame is not on
        screen yet: a beat's panes draw in one frame, but frames do not pile up behind a slow one."""
        if self.drawing_share is None or self._frame_began is None:
            return 0.0
        if now - self._frame_began[0] < STREAM_FRAME_SECONDS / 2:
            return 0.0
        if now - self._frame_began[0] >= LONGEST_FRAME_GAP_SECONDS:
            return 0.0  # its report never came (its pane closed): no longer waited for
        return STREAM_FRAME_SECONDS


def _beat_at(earliest: float) -> float:
    """The first shared beat at or after `earliest`: panes planned apart still draw in one frame."""
    return math.ceil(earliest / STREAM_FRAME_SECONDS) * STREAM_FRAME_SECONDS
