"""The SSE reader and the server-string cleaner take any bytes: a chunk, a clear fault, never a crash."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.backend.chat_stream import ChatStream
from app.backend.server_text import server_text
from app.backend.sse import Chunk, LineSplitter, StreamFault, parse_chunk, parse_line
from engine import TokenEvent

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
FAST = settings(max_examples=300, deadline=None)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
# Chunks near the real shape, so the checks past the top level are reached too.
CHUNKS = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "delta": st.fixed_dictionaries({}, optional={"content": JSON}) | JSON,
                    "finish_reason": JSON,
                },
            )
            | JSON,
            max_size=2,
        )
        | JSON,
        "usage": st.fixed_dictionaries({}, optional={"prompt_tokens": JSON, "completion_tokens": JSON})
        | JSON,
        "error": JSON,
    },
)


def checked(chunk: Chunk | None) -> None:
    """What a parsed chunk may hold: text, and only the finish reasons the pane knows."""
    if chunk is not None:
        assert isinstance(chunk.text, str) and chunk.finish_reason in (None, "stop", "length")


@FAST
@given(st.lists(st.binary(max_size=64), max_size=20), st.integers(1, 64))
def test_the_line_splitter_takes_any_bytes(pieces: list[bytes], cap: int) -> None:
    splitter = LineSplitter(cap)
    lines: list[bytes] = []
    try:
        for piece in pieces:
            lines += splitter.feed(piece)
    except StreamFault as fault:
        assert not CONTROL.search(str(fault))
        return
    assert lines == [line.removesuffix(b"\r") for line in b"".join(pieces).split(b"\n")[:-1]]


def test_a_line_is_the_same_fed_at_once_or_a_byte_at_a_time() -> None:
    stream = b'data: {"a": 1}\r\n\r\ndata: [DONE]\n'
    at_once = LineSplitter().feed(stream)
    splitter = LineSplitter()
    one_by_one = [line for n in range(len(stream)) for line in splitter.feed(stream[n : n + 1])]
    assert at_once == one_by_one == [b'data: {"a": 1}', b"", b"data: [DONE]"]


def test_a_line_over_the_cap_is_a_fault_before_it_is_held() -> None:
    splitter = LineSplitter(cap=1024)
    with pytest.raises(StreamFault, match="longer than"):
        for _ in range(100):
            splitter.feed(b"z" * 100)


@FAST
@given(st.binary(max_size=200))
def test_any_data_line_is_a_chunk_or_a_clear_fault(payload: bytes) -> None:
    try:
        checked(parse_line(b"data: " + payload))
    except StreamFault as fault:
        assert not CONTROL.search(str(fault)) and len(str(fault)) < 300


@FAST
@given(JSON | CHUNKS)
def test_any_json_value_is_a_chunk_or_a_clear_fault(value: Any) -> None:
    try:
        checked(parse_chunk(value))
    except StreamFault as fault:
        assert not CONTROL.search(str(fault)) and len(str(fault)) < 2200


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        (b'data: {"choices": [{"delta": {"content": 12345}}]}', "not text but a int"),
        (b'data: {"choices": {"0": {}}}', "not a list of objects"),
        (b'data: {"error": "out of \\u001b]0;PWNED\\u0007memory"}', "reported an error: out of memory"),
        (b"data: " + b"[" * 100_000, "not a JSON chunk"),
        (b"data: \xff\xfe", "not a JSON chunk"),
    ],
)
def test_a_bad_line_says_what_was_wrong(line: bytes, fault: str) -> None:
    with pytest.raises(StreamFault, match=re.escape(fault)):
        parse_line(line)


@FAST
@given(JSON, st.integers(1, 300))
def test_server_text_is_one_clean_bounded_line(value: Any, limit: int) -> None:
    shown = server_text(value, limit)
    assert not CONTROL.search(shown) and len(shown) <= limit
    assert server_text(shown, limit) == shown


def test_server_text_removes_what_a_terminal_would_run_and_keeps_markup_as_text() -> None:
    evil = "evil\x1b]52;c;cHduZWQK\x1b\\ \x1b]0;PWNED\x07\n\x1b[2J [bold red]markup[/]"
    assert server_text(evil) == "evil [bold red]markup[/]"
    assert server_text("x" * 300, 256) == "x" * 255 + "…"
    assert server_text(10**5000) == "(a int that cannot be shown)"


def test_a_stream_ends_with_one_event_whatever_goes_wrong() -> None:
    """Not only the errors ChatStream knows: any exception ends the reply with an "error" event."""

    def broken(request: httpx.Request) -> httpx.Response:
        raise KeyError("something nobody expected")

    events: list[TokenEvent] = []

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(broken), base_url="http://x") as client:
            body = {"model": "m", "messages": [], "stream": True}
            await ChatStream(client, "chat-1", body, events.append).run()

    asyncio.run(go())
    assert [e.finished for e in events] == [True]
    assert events[0].finish_reason == "error" and "KeyError" in (events[0].error or "")


def test_a_servers_stream_becomes_the_engines_events_with_its_figures() -> None:
    """The remote backend speaks the engine's TokenEvent: text as it comes (no token ids, no prefill
    news), then one final event whose RequestMetrics hold the client's clock and the server's usage."""
    lines = [
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 11,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        },
    ]
    sse = "".join(f"data: {json.dumps(line)}\n\n" for line in lines) + "data: [DONE]\n\n"

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, stream=httpx.ByteStream(sse.encode()), headers={"content-type": "text/event-stream"}
        )

    events: list[TokenEvent] = []

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="http://x") as client:
            body = {"model": "m", "messages": [], "stream": True}
            await ChatStream(client, "chat-1", body, events.append, tag="pane-2").run()

    asyncio.run(go())
    assert [(e.text, e.phase, e.finished) for e in events] == [
        ("Hel", "decode", False),
        ("lo", "decode", False),
        ("", "finished", True),
    ]
    assert all(e.request_id == "chat-1" and e.tag == "pane-2" and e.token_ids == () for e in events)
    last = events[-1]
    m = last.metrics
    assert last.finish_reason == "stop" and m.ttft is not None and m.finished_time is not None
    assert (m.prompt_tokens, m.cached_prompt_tokens, m.generated_tokens) == (11, 8, 2)
    assert events[0].metrics.tokens_per_s == 0.0  # one token: no rate yet
