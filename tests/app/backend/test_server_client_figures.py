"""With --server the dashboard shows what this client knows beside what the server says: a stream
still waiting for its first token, each stream's tokens, and a context count (an estimate, marked
"~") while the server has not yet sent its usage figures, or never will for a stopped reply."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from app.app import LfmChatApp
from app.backend.server_metrics import from_slots
from app.backend.smoothing import RATE_SMOOTHING_SECONDS, Smoothed
from app.core.options import AppOptions
from app.ui.widgets.dashboard import Dashboard
from app.ui.widgets.server_dashboard import server_line, server_lines
from engine import DEFAULT_MODEL
from tests.app.fake_openai import FakeServer
from tests.app.pilot_helpers import chat_screen, submit, wait_until

MakeOptions = Callable[..., AppOptions]


def table_text(dashboard: Dashboard) -> str:
    return "\n".join(" ".join(row) for row in dashboard.table.rows)


async def test_client_streams_tokens_and_an_estimated_context_are_shown(make_options: MakeOptions) -> None:
    with FakeServer(words=["word "] * 200, mode="slow_drip") as server:
        server.spared, server.delay = "Hello", 0.1  # the pane saying "Hello" streams; the other drips
        app = LfmChatApp(make_options(server=server.url, model=DEFAULT_MODEL, panes=2))
        async with app.run_test(size=(160, 40)) as pilot:
            screen = await chat_screen(app, pilot)
            dripping, streaming = screen.panes
            dashboard = screen.query_one(Dashboard)
            await submit(pilot, dripping, "Hi")
            await submit(pilot, streaming, "Hello")

            def meters() -> str:
                return str(dashboard.meters.render())

            await wait_until(pilot, lambda: "1 waiting for a first token" in meters(), "the client's queue")
            await wait_until(pilot, lambda: "pane 2 streaming" in table_text(dashboard), "pane 2's row")
            rows = table_text(dashboard)
            assert "pane 1 waiting" in rows
            assert any(word.endswith("/24") and word != "0/24" for word in rows.split()), rows
            assert str(streaming.border_subtitle).startswith("ctx ~")  # no usage yet: estimated
            streaming.action_stop()
            await wait_until(pilot, lambda: streaming.status.state == "stopped", "the stop")
            assert str(streaming.border_subtitle).startswith("ctx ~")  # a stopped reply gets no usage
            assert "?" not in str(streaming.border_subtitle).split("/")[0]


def test_a_steady_stream_counted_in_bursts_reads_steady() -> None:
    """A server that updates its counter once a second, polled four times a second: 8 tok/s in
    bursts reads 32, 0, 0, 0 raw; smoothed it stays near 8."""
    rate = Smoothed(RATE_SMOOTHING_SECONDS, start=-0.25)
    readings = [rate.update(32.0 if n % 4 == 0 else 0.0, n / 4) for n in range(80)]
    assert all(4 <= r <= 14 for r in readings[4:]), readings  # from the second second on


def test_figures_a_server_never_reports_are_named_not_shown_as_unknown() -> None:
    """llama-server's /slots says only which slots are busy: no "? queued", "kv ?" or "0 preempted"."""
    snap = from_slots([{"is_processing": True}, {"is_processing": False}])
    assert snap is not None
    lines, line = str(server_lines(snap)), server_line(snap)
    assert "batch  1 running" in lines and "not reported: queue, KV cache, prefix hits, preemptions" in lines
    assert "?" not in lines + line and "preempted" not in lines + line


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 5)), min_size=1, max_size=40))
def test_the_smoothed_rate_stays_within_its_readings(readings: list[tuple[float, float]]) -> None:
    """An average: never above the highest reading nor below the lowest, whatever the poll gaps
    (zero included), so a burst can never show as more than it was."""
    rate, now = Smoothed(RATE_SMOOTHING_SECONDS, start=0.0), 0.0
    for n, (value, gap) in enumerate(readings):
        now += gap
        shown = rate.update(value, now)
        seen = [v for v, _ in readings[: n + 1]]
        slack = 1e-9 * max(1.0, max(seen))  # float rounding, not overshoot
        assert min(seen) - slack <= shown <= max(seen) + slack
