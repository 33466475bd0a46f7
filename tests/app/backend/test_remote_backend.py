"""The remote backend over real HTTP against a stand-in OpenAI-compatible server (fake_openai.py)."""

from __future__ import annotations

import contextlib
import itertools
import queue
import time
from collections.abc import Callable, Iterator

import pytest

from app.backend.base import Prompt
from app.backend.http_errors import ServerError
from app.backend.remote import RemoteBackend, pick_model
from app.backend.server_metrics import ServerSnapshot
from app.core.conversation import ChatMessage, ChatSettings, Conversation
from bench.paced_server import PacedServer
from engine import TokenEvent
from tests.app.fake_openai import FakeServer
from tests.waiting import HANG_GUARD, wait_for

CHAT = [{"role": "user", "content": "Hi"}]
SETTINGS = ChatSettings(temperature=0.0, top_k=5, min_p=0.1, repetition_penalty=1.05, max_tokens=32)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as fake:
        yield fake


def run(
    backend: RemoteBackend, settings: ChatSettings = SETTINGS, cancel_after: int | None = None
) -> list[TokenEvent]:
    """Submit one chat and collect its events up to the final one."""
    inbox: queue.Queue[TokenEvent] = queue.Queue()
    stream = backend.submit(Prompt(CHAT), settings, settings.max_tokens, "pane-1", inbox.put)
    events: list[TokenEvent] = []
    while not events or not events[-1].finished:
        events.append(inbox.get(timeout=HANG_GUARD))
        if cancel_after is not None and sum(bool(e.text) for e in events) == cancel_after:
            stream.cancel()
    return events


@contextlib.contextmanager
def polled(url: str) -> Iterator[RemoteBackend]:
    """A backend on `url` polling its metrics 50 times a second, closed on exit."""
    backend = RemoteBackend.connect(url, None, None, poll_interval=0.02)
    try:
        yield backend
    finally:
        backend.close()


def snapshot_when(
    backend: RemoteBackend, holds: Callable[[ServerSnapshot], bool], what: str
) -> ServerSnapshot:
    """The first dashboard snapshot of `backend` that `holds`, waited for."""

    def ready() -> ServerSnapshot | None:
        snap = backend.snapshot()
        return snap if snap is not None and holds(snap) else None

    return wait_for(ready, what)


def first_snapshot(url: str) -> ServerSnapshot:
    """The first dashboard snapshot a backend on `url` publishes."""
    with polled(url) as backend:
        return wait_for(backend.snapshot, "a first dashboard snapshot")


def text(events: list[TokenEvent]) -> str:
    return "".join(e.text for e in events)


def test_a_reply_streams_with_usage_and_timing(server: FakeServer) -> None:
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        assert backend.model_name == "fake" and backend.max_model_len == 4096
        events = run(backend)
    finally:
        backend.close()
    assert text(events) == "Hello from the server."
    last = events[-1]
    assert last.finish_reason == "stop" and last.metrics is not None
    assert last.metrics.prompt_tokens == 11 and last.metrics.generated_tokens == 5
    assert last.metrics.ttft is not None
    body = server.bodies[0]
    assert body["stream_options"] == {"include_usage": True} and body["messages"] == CHAT
    assert body["top_k"] == 5 and body["min_p"] == 0.1 and body["temperature"] == 0.0


def test_tokens_written_apart_are_read_a_few_at_a_time() -> None:
    """A read costs the same whatever it holds and servers write each token apart: the stream
    waits a little after each read (READ_GATHER_SECONDS), so tokens 5 ms apart arrive in groups
    (one read's tokens reach the pane together), all of them, in order."""
    arrivals: list[tuple[float, str]] = []
    with PacedServer(rate=200) as paced:
        backend = RemoteBackend.connect(paced.url, None, None)
        try:
            settings = ChatSettings(max_tokens=120)
            inbox: queue.Queue[TokenEvent] = queue.Queue()

            def put(event: TokenEvent) -> None:
                arrivals.append((time.monotonic(), event.text))
                inbox.put(event)

            backend.submit(Prompt(CHAT), settings, settings.max_tokens, "pane-1", put)
            while not inbox.get(timeout=HANG_GUARD).finished:
                pass
        finally:
            backend.close()
    texts = [text for _, text in arrivals if text]
    assert len(texts) == 120
    groups = 1 + sum(b - a > 0.002 for (a, _), (b, _) in itertools.pairwise(arrivals))
    assert groups < len(texts) / 3, groups  # each token read on its own: ~120 groups


def test_fields_the_server_refuses_are_dropped_with_a_notice(server: FakeServer) -> None:
    server.refuse = ("top_k", "min_p")
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        events = run(backend)
    finally:
        backend.close()
    notices = [e.notice for e in events if e.notice]
    assert notices == ["The server does not take top_k, min_p: sent without."]
    assert text(events) == "Hello from the server." and "top_k" not in server.bodies[-1]


def test_an_overloaded_server_is_retried_and_the_pane_told(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.backend.chat_stream.BACKOFF_CAP", 0.05)
    server.busy_times = 2
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        events = run(backend)
    finally:
        backend.close()
    assert [e.notice for e in events if e.notice] == ["The server is busy (503): retrying in 0 s."] * 2
    assert text(events) == "Hello from the server."


def test_a_connection_dropped_mid_reply_keeps_what_came(server: FakeServer) -> None:
    server.drop_after = 2
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        events = run(backend)
    finally:
        backend.close()
    assert text(events) == "Hello from"
    assert events[-1].finish_reason == "error" and "dropped mid-reply" in (events[-1].error or "")


def test_cancel_closes_the_stream_and_the_server_sees_it(server: FakeServer) -> None:
    server.delay = 0.2
    server.words = [f" w{n}" for n in range(50)]
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        events = run(backend, cancel_after=2)
        wait_for(lambda: not server.running, "the server to see the stream closed")
    finally:
        backend.close()
    assert events[-1].finish_reason == "abort" and len(text(events).split()) < 10
    assert server.running == 0


def test_the_dashboard_reads_vllm_metrics(server: FakeServer) -> None:
    snap = first_snapshot(server.url)
    assert snap is not None and snap.source == "vLLM metrics"
    assert snap.kv_usage == 0.25 and snap.prefix_hit_rate == 0.25 and snap.preemptions == 3


def test_without_metrics_the_snapshot_says_so() -> None:
    with FakeServer(metrics=False) as fake:
        snap = first_snapshot(fake.url)
    assert snap is not None and snap.source == "" and snap.streams_open == 0


def test_a_server_that_stops_answering_is_told_apart_from_one_without_metrics() -> None:
    """The server answers a first poll (so the client holds a kept-alive connection to it), then stops."""
    with contextlib.ExitStack() as stack:
        with FakeServer() as fake:
            backend = stack.enter_context(polled(fake.url))
            wait_for(backend.snapshot, "the server's first figures")
        snap = snapshot_when(backend, lambda s: not s.answering, "the poller to find the server gone")
    assert snap is not None and not snap.answering and snap.source == ""


def test_connect_errors_say_what_to_fix() -> None:
    with FakeServer(api_key="secret") as fake:
        with pytest.raises(ServerError, match="--api-key"):
            RemoteBackend.connect(fake.url, "wrong", None)
        with pytest.raises(ServerError, match="does not serve other; it serves: fake"):
            RemoteBackend.connect(fake.url, "secret", "other")
        url = fake.url
    with pytest.raises(ServerError, match="Cannot reach the server"):
        RemoteBackend.connect(url, None, None)


def test_a_named_model_is_used_when_the_server_lists_none() -> None:
    """transformers serve lists only its Hub cache, not the model it was started with."""
    assert pick_model({"object": "list", "data": []}, "/models/tiny", "http://x") == {"id": "/models/tiny"}
    with pytest.raises(ServerError, match="serves no models"):
        pick_model({"data": []}, None, "http://x")


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_deltas_arrive_as_thinking_before_the_answer(server: FakeServer, field: str) -> None:
    """vLLM's and llama-server's reasoning parsers send thinking beside the text: it comes to the
    pane as `<think>` text, as from a model that writes it inline."""
    server.thinking, server.reasoning_field = ["Let me", " see."], field
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        events = run(backend)
    finally:
        backend.close()
    assert text(events) == "<think>Let me see.</think>Hello from the server."
    assert events[-1].metrics is not None and events[-1].metrics.generated_tokens == 5  # the usage's


CALL = "Calling:<|tool_call_start|>[f()]<|tool_call_end|>"


def test_past_thinking_is_not_sent_back_to_the_server(server: FakeServer) -> None:
    """What a reasoning parser took out of the text goes back without it; tool calls keep their markers."""
    conversation = Conversation(
        [
            ChatMessage("user", "Hi"),
            ChatMessage("assistant", f"<think>Plan it</think>\n\n{CALL}"),
            ChatMessage("user", "More"),
            ChatMessage("assistant", "Plain </thinking> answer"),
            ChatMessage("user", "<think>mine</think> stays"),
        ]
    )
    backend = RemoteBackend.connect(server.url, None, None)
    try:
        sent = [m["content"] for m in backend.prepare(conversation).messages]
    finally:
        backend.close()
    assert sent == [
        "Hi",
        CALL,
        "More",
        "Plain </thinking> answer",
        "<think>mine</think> stays",
    ]
