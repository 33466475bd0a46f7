"""The metrics poller against a real socket server that answers /metrics badly (fake_openai.py)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

from app.backend import server_metrics
from app.backend.remote import RemoteBackend
from app.backend.server_metrics import NO_METRICS, TOO_LARGE, MetricsPoller, ServerSnapshot
from tests.app.backend.test_remote_backend import snapshot_when
from tests.app.fake_openai import VLLM_METRICS, FakeServer

GOOD = VLLM_METRICS % {"running": 2, "generated": 40}


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


async def poll_once(url: str) -> ServerSnapshot:
    async with httpx.AsyncClient(base_url=url) as client:
        return await MetricsPoller(client).poll()


async def test_an_infinite_or_huge_count_is_unknown(server: FakeServer) -> None:
    server.metrics_body = GOOD.replace("} 2\n", "} +Inf\n", 1).replace("} 0.0\n", "} " + "9" * 300 + "\n")
    snap = await poll_once(server.url)
    assert snap.source == "vLLM metrics" and snap.running is None and snap.waiting is None
    assert snap.kv_usage == 0.25


async def test_a_huge_body_is_not_read_past_the_cap(server: FakeServer) -> None:
    server.metrics_body = GOOD + "# padding\n" * 5_000_000  # 50 MB of well-formed comments
    snap = await poll_once(server.url)
    assert snap.source == "" and snap.answering and snap.note == TOO_LARGE


async def test_garbage_is_skipped_and_counted(server: FakeServer) -> None:
    server.metrics_body = GOOD.encode() + b"\xff\xfe\x00garbage\x1b[2J\n{{{\n"
    snap = await poll_once(server.url)
    assert snap.source == "vLLM metrics" and snap.running == 2 and snap.skipped_lines == 2


async def test_a_server_without_metrics_is_asked_less_and_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    now = [0.0]  # the poller's clock: 3 s of polls pass without the test waiting for them
    monkeypatch.setattr(server_metrics, "time", SimpleNamespace(monotonic=lambda: now[0]))

    async def count(request: httpx.Request) -> None:
        asked.append(request.url.path)

    with FakeServer(metrics=False) as fake:
        async with httpx.AsyncClient(base_url=fake.url, event_hooks={"request": [count]}) as client:
            poller = MetricsPoller(client)
            for _ in range(150):  # the backend's 4 polls a second, sped up: one every 0.02 s for 3 s
                snap = await poller.poll()
                now[0] += 0.02
    assert snap.note == NO_METRICS and not snap.source and snap.answering
    assert set(asked) == {"/metrics", "/slots"} and len(asked) <= 10  # 0.5 s, 1 s, 2 s apart; not ~150


def test_polling_goes_on_after_a_bad_answer(server: FakeServer) -> None:
    """An OverflowError from +Inf used to end the polling task: the dashboard froze for the session."""
    server.metrics_body = GOOD.replace("} 2\n", "} +Inf\n", 1)
    backend = RemoteBackend.connect(server.url, None, None, poll_interval=0.02)
    try:
        snap = snapshot_when(backend, lambda s: s.source != "", "figures despite the +Inf")
        assert snap is not None and snap.source == "vLLM metrics" and snap.running is None
        server.metrics_body = GOOD
        snap = snapshot_when(backend, lambda s: s.running == 2, "the next figures")
        assert snap is not None and snap.running == 2
    finally:
        backend.close()
