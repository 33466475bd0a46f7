"""Full garbage collections when no one is typing, not in the middle of a keystroke's frame.

Python collects its oldest generation when enough objects have survived the younger ones; while
8 server panes stream, the frames' Rich segments and strips make that about every 2 s, and each
full collection held the UI thread ~90-100 ms, inside a stream frame a key already waited behind
(bench.key_latency --server, docs/PERFORMANCE.md "2026-11-29 (lines)"). So while the chat screen is
up the oldest generation is not collected automatically (the young ones still are, at Python's
thresholds, a millisecond or so each): the screen collects it every COLLECT_SECONDS when no key
came in the last TYPING_HOLD_SECONDS, and however long the typing, at least every
LONGEST_DEFERRAL_SECONDS, so memory stays bounded.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from app.ui.frame_pacer import TYPING_HOLD_SECONDS

# The oldest generation is collected about this often (Python did it every ~2 s under 8 streams).
COLLECT_SECONDS = 2.0
# However long the typing, a full collection is put off at most this long.
LONGEST_DEFERRAL_SECONDS = 10.0
# The oldest generation's threshold while deferred: far beyond what a deferral lets pile up.
NEVER = 1_000_000


class QuietCollections:
    """Takes the oldest generation's collections from Python (`start`) and runs them while no
    key is arriving (`tick`, called every COLLECT_SECONDS); `stop` gives them back."""

    # False: Python collects whenever its thresholds say, as before (the bench's "before").
    enabled: bool = True

    def __init__(self, typed_at: Callable[[], float], clock: Callable[[], float] = time.monotonic) -> None:
        self._typed_at = typed_at  # when the last key was pressed (the frame pacer knows)
        self._clock = clock
        self._thresholds: tuple[int, int, int] | None = None  # Python's, while taken
        self._collected_at = clock()

    def start(self) -> None:
        if not self.enabled or self._thresholds is not None:
            return
        self._thresholds = gc.get_threshold()
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, NEVER)
        self._collected_at = self._clock()

    def stop(self) -> None:
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    def tick(self) -> bool:
        """Collect the oldest generation unless a key came just now (and the last collection is
        recent enough to wait). True when it collected."""
        if self._thresholds is None:
            return False
        now = self._clock()
        typing = now - self._typed_at() < TYPING_HOLD_SECONDS
        if typing and now - self._collected_at < LONGEST_DEFERRAL_SECONDS:
            return False
        gc.collect()
        self._collected_at = now
        return True
