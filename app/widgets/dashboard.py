"""The scheduler at work: batch, step budget, KV cache, queue, prefix hits, throughput, requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Label, Static

from app.backend.server_metrics import ServerSnapshot
from app.widgets.meter import meter
from app.widgets.server_dashboard import pane_rows, server_line, server_lines
from app.widgets.throughput import Throughput

if TYPE_CHECKING:  # engine.snapshot imports torch, which a server backend never needs
    from engine import EngineSnapshot, RequestSnapshot

PHASE_ORDER = {"decode": 0, "prefill": 1, "preempted": 2, "waiting": 3}
TABLE_ROWS = 4  # the full dashboard's table: a header and this many rows


def progress(request: RequestSnapshot) -> str:
    """Prompt tokens computed while prefilling, else tokens generated, out of the total."""
    if request.phase in ("prefill", "waiting", "preempted") and not request.generated_tokens:
        return f"{request.computed_prompt_tokens}/{request.prompt_tokens}"
    return f"{request.generated_tokens}/{request.max_tokens}"


def one_line(snap: EngineSnapshot) -> str:
    """The dashboard folded for short terminals: the figures that say the scheduler is working."""
    rate = f"{snap.tokens_per_s:.0f} tok/s" if snap.running or snap.waiting else "idle"
    return " · ".join(
        [
            f"engine {rate}",
            f"batch {snap.running}/{snap.max_num_seqs}",
            f"{snap.waiting} queued",
            f"step {snap.step_tokens}/{snap.token_budget} tok",
            f"kv {snap.kv_blocks_used}/{snap.kv_blocks_total}",
            f"prefix {snap.prefix_hit_rate:.0%}",
        ]
    )


class Dashboard(Vertical):
    """Shows one `EngineSnapshot` at a time; never talks to the engine itself.

    Three modes, set by the screen's layout: "full" (meters, sparkline, request table), "line"
    (one line of figures, for short terminals) and "hidden".

    `peak_running` remembers the most requests ever shown running at once: the proof, visible
    to tests, that several panes were batched together.
    """

    def __init__(self, *, id: str | None = None, architecture: str | None = None) -> None:
        super().__init__(id=id)
        self.architecture = architecture  # what the engine runs, in the border title
        self.peak_running = 0
        # Kept as attributes, not queried: a snapshot may still arrive while the screen is torn down.
        self.meters = Static(id="dash-meters")
        self.throughput = Throughput(id="dash-spark")
        self.rate = Label("", id="dash-rate")
        self.table: DataTable[str] = DataTable(id="dash-requests", cursor_type="none", zebra_stripes=True)
        self.line = Static("engine · idle", id="dash-line", markup=False)
        self.mode = "full"
        self._last: tuple[EngineSnapshot | ServerSnapshot, Mapping[object, str]] | None = None

    def compose(self) -> ComposeResult:
        yield self.line
        with Horizontal(id="dash-full"):
            with Vertical(id="dash-stats"):
                yield self.meters
                with Horizontal(id="dash-throughput"):
                    yield Label("tok/s ")
                    yield self.throughput
                    yield self.rate
            yield self.table

    def on_mount(self) -> None:
        self.set_architecture(self.architecture)
        self.table.add_columns("pane", "phase", "tokens", "tok/s")

    def set_architecture(self, architecture: str | None) -> None:
        """What the engine runs, in the border title (a switched model changes it)."""
        self.architecture = architecture
        self.border_title = "engine" if architecture is None else f"engine · {architecture}"

    def set_mode(self, mode: str) -> None:
        """Switch by CSS class (never inline `display`, which would defeat the too-small guard)."""
        if mode == self.mode:
            return
        self.mode = mode
        for name in ("full", "line", "hidden"):
            self.set_class(name == mode, f"-{name}")
        if self._last is not None:
            self.show(*self._last)

    def show(self, snap: EngineSnapshot | ServerSnapshot, labels: Mapping[object, str]) -> None:
        """Render `snap`; `labels` names each request by its tag (the pane it belongs to)."""
        self._last = (snap, labels)
        if isinstance(snap, ServerSnapshot):
            self._show_server(snap, labels)
            return
        self.peak_running = max(self.peak_running, snap.running)
        if self.mode == "line":
            self.line.update(one_line(snap))
        elif self.mode == "full":
            self._show_full(snap, labels)

    def _show_full(self, snap: EngineSnapshot, labels: Mapping[object, str]) -> None:
        kv_text = f" {snap.kv_blocks_used}/{snap.kv_blocks_total} blk · {snap.kv_blocks_cached} cached"
        lines = [
            Text.assemble(
                "batch ",
                meter(snap.running, snap.max_num_seqs),
                f" {snap.running}/{snap.max_num_seqs} running · {snap.waiting} queued",
            ),
            Text.assemble(
                "step  ",
                meter(snap.step_tokens, snap.token_budget),
                f" {snap.step_tokens}/{snap.token_budget} tok",
            ),
            Text.assemble("kv    ", meter(snap.kv_blocks_used, snap.kv_blocks_total), kv_text),
            Text(f"prefix {snap.prefix_hit_rate:.0%} hit · {snap.preemptions} preempted"),
        ]
        self.meters.update(Text("\n").join(lines))
        self.throughput.values = snap.throughput_history
        busy = snap.running or snap.waiting
        self.rate.update(f" {snap.tokens_per_s:.0f}" if busy else " idle")
        self.border_subtitle = f"step {snap.steps} · {snap.step_time * 1000:.1f} ms"
        table = self.table
        table.clear()
        requests = sorted(snap.requests, key=lambda r: PHASE_ORDER.get(r.phase, len(PHASE_ORDER)))
        shown = requests if len(requests) <= TABLE_ROWS else requests[: TABLE_ROWS - 1]
        for request in shown:
            label = labels.get(request.tag, str(request.tag))
            table.add_row(label, request.phase, progress(request), f"{request.tokens_per_s:.0f}")
        hidden = max(len(requests), snap.running + snap.waiting) - len(shown)
        if hidden > 0:
            table.add_row(f"+{hidden}", "more", "", "")

    def _show_server(self, snap: ServerSnapshot, labels: Mapping[object, str]) -> None:
        self.peak_running = max(self.peak_running, snap.running or 0, snap.streams_open)
        self.border_title = "server"
        if self.mode == "line":
            self.line.update(server_line(snap))
        elif self.mode == "full":
            self.meters.update(server_lines(snap))
            self.throughput.values = snap.throughput_history
            busy = snap.streams_open or snap.running
            self.rate.update(f" {snap.tokens_per_s:.0f}" if busy else " idle")
            self.border_subtitle = snap.source or "client-side"
            self.table.clear()
            for row in pane_rows(snap, labels):
                self.table.add_row(*row)
