"""A rate as a person reads it: averaged over a few seconds, not sampled poll by poll.

A server updates its token counter in bursts (vLLM once per engine step or logging interval), so
the difference between two polls 0.25 s apart swings between 0 and several times the real rate:
one steady 6-9 tok/s stream read 12, 0, 0, 6, 4, 14. An exponential moving average over
RATE_SMOOTHING_SECONDS reads steady, and follows a real change within a few seconds.
"""

from __future__ import annotations

import math

RATE_SMOOTHING_SECONDS = 3.0  # the average's time constant


class Smoothed:
    """An exponential moving average weighted by the time each reading covers (polls are uneven).

    It starts from nothing rather than from its first reading, and divides by the weight seen so
    far, so the first seconds read as the average of what came, neither 0 nor one burst.
    """

    def __init__(self, seconds: float, start: float) -> None:
        self.seconds = seconds
        self._at = start
        self._sum = 0.0  # the average of the readings, still scaled by `_weight`
        self._weight = 0.0  # how much of the average the readings so far make up (reaches 1)

    def update(self, reading: float, now: float) -> float:
        """Fold in `reading`, which covers the time since the last one, and return the average."""
        share = 1.0 - math.exp(-max(now - self._at, 0.0) / self.seconds)
        self._at = max(self._at, now)
        self._sum += share * (reading - self._sum)
        self._weight += share * (1.0 - self._weight)
        return self._sum / self._weight if self._weight else reading
