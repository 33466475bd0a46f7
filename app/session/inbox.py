"""Token events from the backend's thread, handed to the view in batches.

One UI message per token floods Textual's queues when several panes stream: key presses and
focus changes then wait behind hundreds of token messages, and the dashboard lags seconds
behind. The engine thread instead appends to an inbox and wakes the pane only when the inbox
was empty; the pane takes everything that arrived since, and draws it once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine import TokenEvent


class TokenInbox:
    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._events: list[TokenEvent] = []
        self._wake = wake

    def put(self, event: TokenEvent) -> None:
        """Backend thread: never blocks on the UI."""
        with self._lock:
            first = not self._events
            self._events.append(event)
        if first:
            self._wake()

    def take(self) -> list[TokenEvent]:
        """UI thread: everything since the last take, oldest first (may be empty after a spare wake)."""
        with self._lock:
            events, self._events = self._events, []
        return events
