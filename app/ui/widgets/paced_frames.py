"""When a streaming pane draws what its inbox holds: at the frame the screen's pacer gives
(app/ui/frame_pacer.py), held while the user types, timed so the next beat is spaced by what
this one cost, and at once when another pane's frame begins (one screen layout for both). Kept
apart from `ChatPane` (app/ui/widgets/chat_pane.py), which mixes it in."""

from __future__ import annotations

import time

from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget

from app.session import PaneSession
from app.ui.frame_pacer import STREAM_FRAME_SECONDS
from app.ui.pane_context import PaneContext


class PacedFrames(Widget):
    """The pane's frames of streamed text; the pane provides its session and context."""

    session: PaneSession
    context: PaneContext
    _frame_timer: Timer | None = None  # the next frame, while the pacer says wait
    _drawn_at = 0.0
    _joining = False  # drawing in another pane's frame, called for already

    def on_chat_pane_woken(self, message: Message) -> None:
        """Draw what arrived at the frame the pacer gives: the inbox wakes the pane only when it
        was empty, so nothing arriving meanwhile is missed."""
        message.stop()
        if self._frame_timer is None and not self._joining:
            self._frame_timer = self.set_timer(
                self.context.pacer.until_frame(self._drawn_at), self._draw_frame
            )
            self.context.pacer.wait(self, self._join_frame)

    def _join_frame(self) -> None:
        """Another pane's frame begins: draw in it rather than in a frame (a screen layout) of our own."""
        if self._frame_timer is not None:
            self._frame_timer.stop()
            self._frame_timer, self._joining = None, True
            self.call_later(self._draw_joined)

    async def _draw_joined(self) -> None:
        self._joining = False
        await self._draw()

    async def _draw_frame(self) -> None:
        """Draw, unless keys arrived since the frame was planned: then wait for the typing to pause
        (or for the next frame, when this one already has its panes)."""
        if (hold := self.context.pacer.hold(self._drawn_at)) > 0:
            self._frame_timer = self.set_timer(hold, self._draw_frame)
            return
        if self.context.pacer.crowded(self):  # the frame has its panes, or panes waiting longer: the next
            self._frame_timer = self.set_timer(STREAM_FRAME_SECONDS / 2, self._draw_frame)
            return
        self._frame_timer = None
        await self._draw()

    async def _draw(self) -> None:
        self.context.pacer.join(self)
        self._drawn_at = time.monotonic()
        if self.context.pacer.frame_begun():
            self.call_after_refresh(self._frame_shown)  # the frame's cost spaces the next beat
        await self.session.apply(self.session.inbox.take())

    def on_unmount(self) -> None:
        self.context.pacer.forget(self)

    def _frame_shown(self) -> None:
        if self.context.pacer.frame_shown():
            self.call_after_refresh(self._frame_shown)
