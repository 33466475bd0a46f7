"""One line under a pane's transcript: what its request is doing and what it cost."""

from __future__ import annotations

from textual.widgets import Static

from app.backend.base import Metrics

STATES = ("idle", "queued", "preempted", "prefill", "decoding", "stopping", "stopped", "error")


class PaneStatus(Static):
    """State (idle / queued / prefill progress / decoding / stopped), prompt+generated tokens (and how
    many prompt tokens came from the prefix cache), TTFT and tok/s.

    Kept as plain fields plus one `show` call so the pane decides what changed and the widget
    only formats it.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("idle", id=id, markup=False)
        self.state = "idle"
        self.metrics: Metrics | None = None
        self.prefill: tuple[int, int] | None = None
        self.model = ""  # the pane's own model on a server (panes may differ); "" locally

    def show(
        self, state: str, metrics: Metrics | None = None, prefill: tuple[int, int] | None = None
    ) -> None:
        """Set the state; metrics are kept from the previous call unless new ones are given."""
        self.state = state
        self.metrics = metrics or self.metrics
        self.prefill = prefill
        for name in STATES:
            self.set_class(name == state, f"-{name}")
        self.update(self.describe())

    def reset(self) -> None:
        """A new conversation: nothing of the old one's figures stays on screen."""
        self.metrics = None
        self.show("idle")

    def describe(self) -> str:
        parts = [self.state]
        if self.state == "prefill" and self.prefill:
            done, total = self.prefill
            parts = [f"prefill {done}/{total}"]
        m = self.metrics
        if m is not None and self.state not in ("queued", "prefill"):
            cached = f" ({m.cached_prompt_tokens} cached)" if m.cached_prompt_tokens else ""
            # a server's prompt count comes with its last chunk; until then only the reply's is known
            prompt = f"{m.prompt_tokens}+" if m.prompt_tokens else ""
            parts.append(f"{prompt}{m.generated_tokens} tok{cached}")
            if m.ttft is not None:
                parts.append(f"ttft {m.ttft:.2f}s")
            if m.tokens_per_s:
                parts.append(f"{m.tokens_per_s:.0f} tok/s")
        if self.model:
            parts.append(self.model)
        return " · ".join(parts)
