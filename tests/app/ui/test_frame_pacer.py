"""When a streaming pane may draw: on the shared beat, held while keys arrive, never held for long."""

from __future__ import annotations

import pytest

from app.ui.frame_pacer import (
    DRAWING_SHARE,
    FRAME_BUDGET_SECONDS,
    FRAME_REFRESHES,
    LONGEST_FRAME_GAP_SECONDS,
    MAX_HOLD_SECONDS,
    STREAM_FRAME_SECONDS,
    TYPING_HOLD_SECONDS,
    FramePacer,
)


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


def paced(cost: float) -> tuple[FramePacer, Clock]:
    """A pacer whose one frame, begun at t=30 and shown at t=30.2, cost `cost` s of the UI thread."""
    clock, cpu = Clock(30.0), Clock(7.0)
    pacer = FramePacer(clock, cpu)
    assert pacer.frame_begun()
    assert not pacer.frame_begun()  # the beat's other panes draw in the same frame: measured once
    clock.now, cpu.now = 30.2, 7.0 + cost
    show(pacer)
    return pacer, clock


def show(pacer: FramePacer) -> None:
    """The screen refreshes until the frame is measured (its Markdown mounts over a few refreshes)."""
    refreshes = 1
    while pacer.frame_shown():
        refreshes += 1
    assert refreshes == FRAME_REFRESHES


def test_a_costly_frame_spaces_the_next_beat_so_drawing_keeps_to_its_share_of_the_thread() -> None:
    pacer, clock = paced(cost=0.1)
    next_frame = clock.now + pacer.until_frame(drawn_at=30.0)
    assert next_frame >= 30.0 + 0.1 / DRAWING_SHARE
    assert next_frame < 30.0 + 0.1 / DRAWING_SHARE + STREAM_FRAME_SECONDS
    beats = next_frame / STREAM_FRAME_SECONDS
    assert beats == pytest.approx(round(beats), abs=1e-6)  # still on the shared beat
    # A pane whose frame was planned before the cost was known waits for the same beat.
    assert clock.now + pacer.hold(drawn_at=30.0) == pytest.approx(next_frame)


def test_cheap_frames_keep_the_full_frame_rate() -> None:
    pacer, _ = paced(cost=0.005)
    assert pacer.until_frame(drawn_at=30.2) <= STREAM_FRAME_SECONDS + 1e-9
    assert pacer.hold(drawn_at=30.0) == 0.0


def test_a_stalled_frame_delays_the_streams_for_at_most_the_longest_gap() -> None:
    pacer, clock = paced(cost=30.0)
    assert (
        clock.now + pacer.until_frame(drawn_at=30.0)
        <= 30.0 + LONGEST_FRAME_GAP_SECONDS + STREAM_FRAME_SECONDS
    )


def test_a_frame_whose_end_was_never_reported_does_not_stop_the_measuring() -> None:
    clock = Clock(10.0)
    pacer = FramePacer(clock, Clock(0.0))
    assert pacer.frame_begun()  # its pane closed before the screen refreshed
    clock.now += LONGEST_FRAME_GAP_SECONDS
    assert pacer.frame_begun()


def test_a_fixed_beat_ignores_the_frames_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FramePacer, "drawing_share", None)
    pacer, _ = paced(cost=0.1)
    assert pacer.until_frame(drawn_at=30.2) <= STREAM_FRAME_SECONDS + 1e-9


def test_a_later_beat_waits_while_the_frame_before_it_is_not_on_screen() -> None:
    clock = Clock(20.0)
    pacer = FramePacer(clock, Clock(0.0))
    assert pacer.frame_begun()
    clock.now += 0.005
    assert pacer.hold(drawn_at=19.0) == 0.0  # the same beat's panes join its frame
    clock.now += STREAM_FRAME_SECONDS
    assert pacer.hold(drawn_at=19.0) > 0.0  # the next beat: the screen has not shown the frame yet
    show(pacer)
    assert pacer.hold(drawn_at=19.0) == 0.0


def test_a_pane_that_draws_pulls_every_waiting_pane_into_its_frame() -> None:
    pacer = FramePacer(Clock(5.0))
    drawn: list[str] = []
    for pane in ("a", "b", "c"):
        pacer.wait(pane, lambda pane=pane: drawn.append(pane))
    pacer.forget("c")  # closed meanwhile
    pacer.join("a")  # "a" draws: "b" draws in the same frame, "a" is not called back for its own
    assert drawn == ["b"]
    pacer.join("b")
    assert drawn == ["b"]  # each wait is for one frame


def test_panes_held_by_typing_run_out_together_whenever_each_drew_last() -> None:
    clock = Clock(10.0)
    pacer = FramePacer(clock)
    pacer.join("a")  # "a" drew at 10.0, "b" one beat later
    clock.now += STREAM_FRAME_SECONDS
    pacer.join("b")
    pacer.key_pressed()
    ends = {round(clock.now + pacer.hold(drawn_at=drawn), 9) for drawn in (10.0, 10.0 + STREAM_FRAME_SECONDS)}
    assert ends == {round(10.0 + STREAM_FRAME_SECONDS + TYPING_HOLD_SECONDS, 9)}
    while clock.now < 10.0 + MAX_HOLD_SECONDS:  # typing goes on: both stay held up to the longest hold
        clock.now += 0.1
        pacer.key_pressed()
    ends = {round(clock.now + pacer.hold(drawn_at=drawn), 9) for drawn in (10.0, 10.0 + STREAM_FRAME_SECONDS)}
    assert ends == {round(10.0 + STREAM_FRAME_SECONDS + MAX_HOLD_SECONDS, 9)}


def test_apart_panes_draw_in_frames_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FramePacer, "together", False)
    pacer = FramePacer(Clock(5.0))
    drawn: list[str] = []
    pacer.wait("b", lambda: drawn.append("b"))
    pacer.join("a")
    assert drawn == []


def test_while_keys_arrive_a_frame_draws_one_pane_by_default() -> None:
    drawn: list[str] = []
    pacer = FramePacer(Clock(40.0), Clock(0.0))
    for pane in "bc":
        pacer.wait(pane, lambda pane=pane: drawn.append(pane))
    pacer.key_pressed()
    pacer.join("a")
    assert drawn == []  # "b" and "c" wait for the next frames
    assert pacer.crowded("c")


def test_while_keys_arrive_a_frame_draws_a_few_panes_and_the_rest_the_next_frames() -> None:
    clock = Clock(40.0)
    pacer = FramePacer(clock, Clock(0.0), typing_frame_panes=2)
    drawn: list[str] = []
    for pane in "bcdefgh":
        pacer.wait(pane, lambda pane=pane: drawn.append(pane))
    pacer.key_pressed()
    assert pacer.frame_begun()
    pacer.join("a")  # "a" draws and pulls in the longest waiting, up to 2 panes in all
    assert drawn == ["b"]
    assert pacer.crowded("c")  # the others, due, wait for the next frame
    pacer.frame_shown()  # the screen shows the frame (and the keys typed meanwhile)
    assert not pacer.crowded("c")
    pacer.join("c")
    assert drawn == ["b", "d"]  # the next frame: again a few
    clock.now += TYPING_HOLD_SECONDS + 0.01  # the typing paused: a frame draws every waiting pane
    pacer.join("e")
    assert drawn == ["b", "d", "f", "g", "h"]


def test_panes_left_out_of_a_frame_keep_their_hold_from_the_frame_before() -> None:
    clock = Clock(60.0)
    pacer = FramePacer(clock, Clock(0.0), typing_frame_panes=2)
    pacer.join("a")  # the last frame before the typing: every pane drew at 60.0
    clock.now += MAX_HOLD_SECONDS  # typing held them since
    pacer.key_pressed()
    for pane in "bcd":
        pacer.wait(pane, lambda: None)
    assert pacer.hold(drawn_at=60.0) == 0.0  # all due at once
    pacer.join("a")  # draws with "b"; "c" and "d" are left out
    clock.now += STREAM_FRAME_SECONDS
    pacer.key_pressed()
    pacer.frame_shown()
    assert pacer.hold(drawn_at=60.0) == 0.0  # not held another MAX_HOLD_SECONDS by the frame "a" drew in
    pacer.join("c")  # draws with "d": nobody is left out
    assert pacer.hold(drawn_at=60.0) == pytest.approx(TYPING_HOLD_SECONDS)  # held together again


def test_without_typing_a_frame_draws_as_many_panes_as_its_budget_fits_at_the_measured_cost() -> None:
    """A key pressed after a pause waits for the frame being drawn: 8 costly panes in one frame
    made it ~400 ms, so a frame takes as many panes as FRAME_BUDGET_SECONDS holds at the cost a
    pane of the last frame measured; before any measure (or when panes are cheap), all of them."""
    clock, cpu = Clock(70.0), Clock(0.0)
    pacer = FramePacer(clock, cpu)
    drawn: list[str] = []
    for pane in "bcdefgh":
        pacer.wait(pane, lambda pane=pane: drawn.append(pane))
    assert pacer.frame_begun()
    pacer.join("a")  # nothing measured yet: every waiting pane draws in this frame
    assert drawn == list("bcdefgh") and not pacer.crowded("b")
    cpu.now += 8 * FRAME_BUDGET_SECONDS / 2  # the 8 panes cost half the budget each
    show(pacer)
    clock.now += 1.0
    for pane in "bcdefgh":
        pacer.wait(pane, lambda pane=pane: drawn.append(pane))
    pacer.join("a")
    assert drawn[7:] == ["b"]  # two panes in all fit the budget
    assert pacer.crowded("c")  # the rest draw in the next frames
    pacer.frame_shown()
    assert not pacer.crowded("c") and not pacer.crowded("d")
    assert pacer.crowded("e")  # the room is for the two that waited longest
    pacer.join("c")
    pacer.wait("c", lambda: drawn.append("c"))  # "c" drew and has more: it waits behind the others
    pacer.frame_shown()
    assert pacer.crowded("c") and not pacer.crowded("e")
