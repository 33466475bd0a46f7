"""Full garbage collections run while no key arrives (and at least every so often), never on
Python's own schedule while the chat screen is up; the young generations keep theirs."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.ui.frame_pacer import TYPING_HOLD_SECONDS
from app.ui.quiet_collections import LONGEST_DEFERRAL_SECONDS, QuietCollections


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """One entry per collection of the oldest generation, whoever started it."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def test_python_does_not_collect_the_oldest_generation_while_started(full_collections: list[int]) -> None:
    thresholds = gc.get_threshold()
    collections = QuietCollections(lambda: -1e9)
    collections.start()
    try:
        kept = [[] for _ in range(300_000)]  # survivors (a whole heap's worth), as long replies make
        assert not full_collections  # Python alone collected the oldest generation a few times here
        del kept
        assert gc.get_count()[0] < thresholds[0] + 1  # the young generation is still collected
    finally:
        collections.stop()
    assert gc.get_threshold() == thresholds


def test_a_tick_collects_when_no_key_came_and_defers_while_typing(full_collections: list[int]) -> None:
    clock = Clock(100.0)
    typed_at = [-1e9]
    collections = QuietCollections(lambda: typed_at[0], clock)
    assert not collections.tick()  # not started: Python's schedule
    collections.start()
    try:
        assert collections.tick() and len(full_collections) == 1  # nobody types
        typed_at[0] = clock.now = 102.0
        clock.now += TYPING_HOLD_SECONDS / 2
        assert not collections.tick()  # a key just came
        clock.now = 100.0 + LONGEST_DEFERRAL_SECONDS
        typed_at[0] = clock.now - TYPING_HOLD_SECONDS / 2
        assert collections.tick()  # typing for that long: collected anyway, memory stays bounded
        typed_at[0] = clock.now
        clock.now += TYPING_HOLD_SECONDS * 2
        assert collections.tick()  # the typing paused
        assert len(full_collections) == 3
    finally:
        collections.stop()
