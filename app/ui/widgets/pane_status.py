"""One line under a pane's transcript: what its request is doing and what it cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.widgets import Static

from app.ui.keys import PANE_KEYS, key_named

if TYPE_CHECKING:
    from engine import RequestMetrics

STATES = ("idle", "queued", "preempted", "prefill", "decoding", "stopping", "stopped", "error", "cut")
HINT = 5  # a key hint's priority: left out before any figure is shortened


class PaneStatus(Static):
    """State (idle / queued / prefill progress / decoding / stopped), prompt+generated tokens (and how
    many prompt tokens came from the prefix cache), TTFT and tok/s.

    Kept as plain fields plus one `show` call so the pane decides what changed and the widget
    only formats it.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("idle", id=id, markup=False)
        self.state = "idle"
        self.metrics: RequestMetrics | None = None
        self.prefill: tuple[int, int] | None = None
        self.model = ""  # the pane's own model on a server (panes may differ); "" locally
        self.tool_step = ""  # "tool step 2/8" while a turn calls tools

    def show(
        self, state: str, metrics: RequestMetrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        """Set the state; metrics are kept from the previous call unless new ones are given."""
        self.state = state
        self.metrics = metrics or self.metrics
        self.prefill = prefill
        for name in STATES:
            self.set_class(name == state, f"-{name}")
        self.refresh()

    def reset(self) -> None:
        """A new conversation: nothing of the old one's figures stays on screen."""
        self.metrics = None
        self.show("idle")

    def render(self) -> str:
        """The line fitted to the width it has now (a narrow pane keeps what matters most)."""
        return fit(self.parts(), self.content_region.width)

    def describe(self) -> str:
        """The whole line, unabbreviated."""
        return " · ".join(part.full for part in self.parts())

    def parts(self) -> list[Part]:
        """The line's parts in screen order, each with its priority (0 is kept longest)."""
        state = self.state
        if state == "prefill" and self.prefill:
            done, total = self.prefill
            state = f"prefill {done}/{total}"
        parts = [Part(0, state, state)]
        if state == "cut":  # the reply's token limit stopped it: the key that continues it
            go_on = f"{key_named(self.app, PANE_KEYS, 'continue_reply')} continue"
            parts.append(Part(HINT, go_on, go_on))
        if self.tool_step:
            parts.append(Part(1, self.tool_step, self.tool_step.removeprefix("tool ")))
        m = self.metrics
        if m is not None and self.state not in ("queued", "prefill"):
            # a server's prompt count comes with its last chunk; until then only the reply's is known
            prompt = f"{m.prompt_tokens}+" if m.prompt_tokens else ""
            tokens = f"{prompt}{m.generated_tokens}"
            if m.cached_prompt_tokens:
                cached = m.cached_prompt_tokens
                parts.append(Part(1, f"{tokens} tok ({cached} cached)", f"{tokens}t ({cached}c)"))
            else:
                parts.append(Part(1, f"{tokens} tok", f"{tokens}t"))
            if m.ttft is not None:
                parts.append(Part(3, f"ttft {m.ttft:.2f}s", f"ttft {m.ttft:.1f}"))
            if m.tokens_per_s:
                parts.append(Part(2, f"{m.tokens_per_s:.0f} tok/s", f"{m.tokens_per_s:.0f}t/s"))
        if self.model:  # the pane's own model on a server: left out first when narrow
            parts.append(Part(4, self.model, self.model))
        return parts


@dataclass(frozen=True, slots=True)
class Part:
    priority: int
    full: str
    short: str


def fit(parts: list[Part], width: int) -> str:
    """The whole line if it fits; else without key hints; else every part abbreviated; else the
    least important parts left out, one at a time; a line that still does not fit is cut with an
    ellipsis."""
    line = " · ".join(part.full for part in parts)
    if len(line) <= width or width <= 0:
        return line
    kept = [part for part in parts if part.priority < HINT]
    line = " · ".join(part.full for part in kept)
    if len(line) <= width:
        return line
    while True:
        line = " · ".join(part.short for part in kept)
        if len(line) <= width or len(kept) == 1:
            break
        kept.remove(max(kept, key=lambda part: part.priority))
    return line if len(line) <= width else line[: width - 1] + "…"
