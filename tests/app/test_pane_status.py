"""The status line says what a pane's request is doing, in the states the issue lists."""

from __future__ import annotations

from app.widgets.pane_status import PaneStatus
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
