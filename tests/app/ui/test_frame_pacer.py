"""When a streaming pane may draw: on the shared beat, held while keys arrive, never held for long."""

from __future__ import annotations

import pytest

from app.ui.frame_pacer import MAX_HOLD_SECONDS, STREAM_FRAME_SECONDS, TYPING_HOLD_SECONDS, FramePacer


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_panes_woken_at_different_moments_draw_on_the_same_beat() -> None:
    clock = Clock(100.0)
    pacer = FramePacer(clock)
    frames = set()
    for offset in (0.001, 0.013, 0.029, 0.05):
        clock.now = 100.0 + offset
        frames.add(round(clock.now + pacer.until_frame(drawn_at=0.0), 9))
    assert len(frames) == 1 and frames.pop() % STREAM_FRAME_SECONDS == pytest.approx(0, abs=1e-6)


def test_typing_holds_the_frames_until_it_pauses_but_never_past_the_longest_hold() -> None:
    clock = Clock(50.0)
    pacer = FramePacer(clock)
    assert pacer.hold(drawn_at=49.0) == 0.0
    pacer.key_pressed()
    assert pacer.hold(drawn_at=49.99) == pytest.approx(TYPING_HOLD_SECONDS)
    assert pacer.until_frame(drawn_at=49.99) == pytest.approx(TYPING_HOLD_SECONDS)
    assert pacer.hold(drawn_at=50.0 - MAX_HOLD_SECONDS) == 0.0  # held long enough: draw now
    clock.now += TYPING_HOLD_SECONDS
    assert pacer.hold(drawn_at=49.99) == 0.0  # the typing paused
