"""The status line says what a pane's request is doing, in the states the issue lists."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from textual.app import App, ComposeResult
from textual.containers import Horizontal

from app.ui.widgets.pane_status import HINT, PaneStatus, Part, fit
from engine import RequestMetrics


def metrics() -> RequestMetrics:
    done = RequestMetrics(arrival_time=10.0, prompt_tokens=40, cached_prompt_tokens=32)
    for now in (10.5, 11.0, 11.5):
        done.on_token(now)
    return done


def test_each_state_reads_as_expected() -> None:
    status = PaneStatus()
    assert status.describe() == "idle"
    status.show("queued")
    assert status.describe() == "queued"
    status.show("prefill", prefill=(16, 40))
    assert status.describe() == "prefill 16/40"
    status.show("decoding", metrics())
    assert status.describe() == "decoding · 40+3 tok (32 cached) · ttft 0.50s · 2 tok/s"
    status.show("stopped")  # keeps the last figures
    assert status.describe().startswith("stopped · 40+3 tok (32 cached)")
    assert status.has_class("-stopped") and not status.has_class("-decoding")


def test_a_server_reply_before_its_usage_shows_the_reply_tokens_only() -> None:
    """A remote server tells the prompt's size with its last chunk; until then '0+' would be wrong."""
    streaming = RequestMetrics(arrival_time=10.0, prompt_tokens=0)
    for now in (10.5, 11.0):
        streaming.on_token(now)
    status = PaneStatus()
    status.show("decoding", streaming)
    assert status.describe().startswith("decoding · 2 tok · ttft 0.50s")


class ThreePanes(App[None]):
    """Three status lines side by side, as three panes share a 160-column terminal."""

    CSS = "PaneStatus { width: 1fr; border: round white; }"  # a pane's border takes 2 columns

    def compose(self) -> ComposeResult:
        with Horizontal():
            for _ in range(3):
                yield PaneStatus()


def busy_metrics() -> RequestMetrics:
    busy = RequestMetrics(arrival_time=10.0, prompt_tokens=1234, cached_prompt_tokens=1200)
    for n in range(60):
        busy.on_token(10.52 + n / 12)
    return busy


async def test_three_status_lines_fit_160_columns_keeping_what_matters_most() -> None:
    async with ThreePanes().run_test(size=(160, 5)) as pilot:
        statuses = list(pilot.app.query(PaneStatus))
        for status in statuses:
            status.show("decoding", busy_metrics())
        await pilot.pause()
        for status in statuses:
            width = status.content_region.width
            shown = str(status.render())
            assert len(shown) <= width < len(status.describe())
            assert shown.startswith("decoding") and "1234+60" in shown and "1200" in shown and "t/s" in shown


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 120), st.integers(0, 10**9), st.integers(0, 10**9), st.floats(0, 1e5))
def test_a_fitted_line_never_passes_its_width(width: int, prompt: int, generated: int, ttft: float) -> None:
    parts = [Part(0, "decoding", "decoding"), Part(1, f"{prompt}+{generated} tok", f"{prompt}+{generated}t")]
    parts.append(Part(3, f"ttft {ttft:.2f}s", f"ttft {ttft:.1f}"))
    line = fit(parts, width)
    assert len(line) <= width
    assert line == " · ".join(p.full for p in parts) or len(" · ".join(p.full for p in parts)) > width


def test_a_key_hint_gives_way_before_any_figure_is_shortened() -> None:
    parts = [
        Part(0, "cut", "cut"),
        Part(HINT, "alt+g continue", "alt+g continue"),
        Part(1, "40+3 tok", "40+3t"),
    ]
    assert fit(parts, 80) == "cut · alt+g continue · 40+3 tok"
    assert fit(parts, 20) == "cut · 40+3 tok"
    assert fit(parts, 11) == "cut · 40+3t"
