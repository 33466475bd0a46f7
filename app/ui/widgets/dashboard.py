"""The scheduler at work: batch, step budget, KV cache, queue, prefix hits, throughput, requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Static

from app.backend.server_metrics import ServerSnapshot
from app.ui.widgets.meter import meter
from app.ui.widgets.request_table import RequestTable
from app.ui.widgets.server_dashboard import pane_rows, server_line, server_lines
from app.ui.widgets.throughput import Throughput

if TYPE_CHECKING:  # engine.snapshot imports torch, which a server backend never needs
    from engine import EngineSnapshot, RequestSnapshot

PHASE_ORDER = {"decode": 0, "prefill": 1, "preempted": 2, "waiting": 3}
TABLE_ROWS = 4  # the full dashboard's table: a header and this many rows
COLUMNS = ("pane", "phase", "tokens", "tok/s")  # one request's cells (request_cells)
COLUMN_SET_WIDTH = 38  # cells one set of COLUMNS needs; a wide table lists requests in several sets
# Why the head of the queue waits (engine.scheduler.WAIT_REASONS), as the dashboard says it.
WAIT_WORDS = {
    "preemption": "KV cache short, preempted",
    "max_batch": "batch full",
    "token_budget": "step token budget spent",
    "kv_blocks": "no free KV blocks",
}


def progress(request: RequestSnapshot) -> str:
    """Prompt tokens computed while prefilling, else tokens generated, out of the total; and how
    many prompt tokens the prefix cache served (a fork's or a regenerate's whole history)."""
    cached = f" ({request.cached_prompt_tokens} cached)" if request.cached_prompt_tokens else ""
    if request.phase in ("prefill", "waiting", "preempted") and not request.generated_tokens:
        return f"{request.computed_prompt_tokens}/{request.prompt_tokens}{cached}"
    return f"{request.generated_tokens}/{request.max_tokens}{cached}"


def request_cells(request: RequestSnapshot, labels: Mapping[object, str]) -> tuple[str, ...]:
    """One request's row, in the order of COLUMNS."""
    label = labels.get(request.tag, str(request.tag))
    return (label, request.phase, progress(request), f"{request.tokens_per_s:.0f}")


def queued(snap: EngineSnapshot) -> str:
    """The queue's length, and why its head waits when the scheduler said."""
    why = WAIT_WORDS.get(snap.wait_reason) if snap.waiting else None
    return f"{snap.waiting} queued" + (f": {why}" if why else "")


def table_grid(cells: list[tuple[str, ...]], total: int, sets: int) -> list[tuple[str, ...]]:
    """`cells` laid out down then across `sets` column sets of TABLE_ROWS rows; when `total` is
    more than fit, the last place says how many are not listed."""
    room = sets * TABLE_ROWS
    shown = cells if total <= room else cells[: room - 1]
    if total > len(shown):
        shown = [*shown, (f"+{total - len(shown)}", "more", *[""] * (len(COLUMNS) - 2))]
    used = -(-len(shown) // TABLE_ROWS)  # sets with something in them
    blank = ("",) * len(COLUMNS)
    rows = []
    for row in range(min(TABLE_ROWS, len(shown))):
        places = (shown[n] if n < len(shown) else blank for n in range(row, used * TABLE_ROWS, TABLE_ROWS))
        rows.append(tuple(cell for place in places for cell in place))
    return rows


def one_line(snap: EngineSnapshot) -> str:
    """The dashboard folded for short terminals: the figures that say the scheduler is working."""
    rate = f"{snap.tokens_per_s:.0f} tok/s" if snap.running or snap.waiting else "idle"
    return " · ".join(
        [
            f"engine {rate}",
            f"batch {snap.running}/{snap.max_num_seqs}",
            queued(snap),
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
        self.table = RequestTable(COLUMNS, id="dash-requests")
        self.line = Static("engine · idle", id="dash-line", markup=False)
        self.mode = "full"
        self._last: tuple[EngineSnapshot | ServerSnapshot, Mapping[object, str]] | None = None
        # Panes with no request because they wait on a tool or on their user: label -> phase.
        self.tool_waits: dict[str, str] = {}

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

    def show_tool_waits(self, waits: dict[str, str]) -> None:
        """Panes waiting on a tool ("tool") or on their user ("you"), listed beside the requests
        (which wait on the model): a waiting pane holds no request in the engine."""
        if waits != self.tool_waits:
            self.tool_waits = waits
            if self._last is not None:
                self.show(*self._last)

    def _wait_cells(self) -> list[tuple[str, ...]]:
        return [(label, phase, *[""] * (len(COLUMNS) - 2)) for label, phase in self.tool_waits.items()]

    def _wait_words(self) -> str:
        return f" · {len(self.tool_waits)} waiting on tools" if self.tool_waits else ""

    def show(self, snap: EngineSnapshot | ServerSnapshot, labels: Mapping[object, str]) -> None:
        """Render `snap`; `labels` names each request by its tag (the pane it belongs to)."""
        self._last = (snap, labels)
        if isinstance(snap, ServerSnapshot):
            self._show_server(snap, labels)
            return
        self.peak_running = max(self.peak_running, snap.running)
        if self.mode == "line":
            self.line.update(one_line(snap) + self._wait_words(), layout=False)
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
                f" · spec {snap.step_accepted_tokens}/{snap.step_draft_tokens}",  # drafts accepted/verified
            ),
            Text.assemble("kv    ", meter(snap.kv_blocks_used, snap.kv_blocks_total), kv_text),
            Text(f"prefix {snap.prefix_hit_rate:.0%} hit · {snap.preemptions} preempted"),
        ]
        self.meters.update(Text("\n").join(lines), layout=False)
        self.throughput.values = snap.throughput_history
        busy = snap.running or snap.waiting
        self.rate.update(f" {snap.tokens_per_s:.0f}" if busy else " idle", layout=False)
        step = f"step {snap.steps} · {snap.step_time * 1000:.1f} ms"
        self.border_subtitle = f"{queued(snap)} · {step}" if snap.wait_reason and snap.waiting else step
        requests = sorted(snap.requests, key=lambda r: PHASE_ORDER.get(r.phase, len(PHASE_ORDER)))
        cells = [request_cells(request, labels) for request in requests]
        waits = self._wait_cells()
        self._fill_table(cells + waits, max(len(requests), snap.running + snap.waiting) + len(waits))

    def _fill_table(self, cells: list[tuple[str, ...]], total: int) -> None:
        """As many column sets side by side as the table's width holds, and only as many as needed."""
        sets = max(1, self.table.size.width // COLUMN_SET_WIDTH)
        rows = table_grid(cells, total, sets)
        width = max((len(row) for row in rows), default=len(COLUMNS))
        self.table.show(COLUMNS * (width // len(COLUMNS)), rows)

    def _show_server(self, snap: ServerSnapshot, labels: Mapping[object, str]) -> None:
        self.peak_running = max(self.peak_running, snap.running or 0, snap.streams_open)
        self.border_title = "server"
        self.add_class("-server")  # its meters name what the client sees too: a wider column
        if self.mode == "line":
            self.line.update(server_line(snap) + self._wait_words(), layout=False)
        elif self.mode == "full":
            self.meters.update(server_lines(snap), layout=False)
            self.throughput.values = snap.throughput_history
            busy = snap.streams_open or snap.running
            self.rate.update(f" {snap.tokens_per_s:.0f}" if busy else " idle", layout=False)
            self.border_subtitle = snap.source or "client-side"
            rows = pane_rows(snap, labels) + self._wait_cells()
            self._fill_table(rows, len(rows))
