"""Waiting for something to happen in another thread or process: on the thing itself, never on a time.

A test that gives a poller "5 s to notice" fails whenever the machine is busy enough to make it
take 6. Here a test names what it waits for and gets it as soon as it holds; ``HANG_GUARD`` only
turns a hang into a failure, and is far beyond what any wait takes on a loaded machine.
(App tests wait through tests/app/pilot_helpers.py's ``wait_until``, which also lets Textual run.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

HANG_GUARD = 120.0  # seconds; only a hang reaches it (the machine is shared and slow)
POLL = 0.01  # seconds between looks: short, since a look is cheap and the condition is what counts


def wait_for(condition: Callable[[], T], what: str, guard: float = HANG_GUARD) -> T:
    """``condition()``'s first truthy value, looked at every ``POLL`` s; fails naming ``what`` after
    ``guard`` s."""
    give_up = time.monotonic() + guard
    while not (value := condition()):
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what} after {guard:.0f} s")
        time.sleep(POLL)
    return value
