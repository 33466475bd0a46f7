"""A server's streamed tool calls put back together as an LFM2 block that the engine's parser reads,
and the shapes a server must not send refused with a sentence."""

from __future__ import annotations

import pytest

from app.backend.sse import StreamFault, parse_chunk
from app.backend.tool_deltas import MAX_CALLS, CallDeltas
from engine import ToolCallStream


def calls_in(text: str) -> list[tuple[str, dict]]:
    parser = ToolCallStream()
    parser.feed(text)
    parser.finish()
    return [(call.name, call.argument_values) for call in parser.calls]


def test_openai_deltas_become_calls_the_parser_reads() -> None:
    deltas = CallDeltas()
    parts = [
        {"index": 0, "id": "a", "function": {"name": "get_weather"}},
        {"index": 0, "function": {"arguments": '{"city": '}},
        {"index": 1, "function": {"name": "now", "arguments": ""}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
    ]
    for part in parts:
        deltas.add(parse_chunk({"choices": [{"delta": {"tool_calls": [part]}}]}).tool_calls or [])
    assert calls_in(deltas.as_text()) == [("get_weather", {"city": "Paris"}), ("now", {})]
    assert CallDeltas().as_text() == ""


@pytest.mark.parametrize(
    ("parts", "says"),
    [
        (["call"], "not {index, function"),
        ([{"index": "0", "function": {}}], "not {index, function"),
        ([{"index": 0, "function": {"name": 3}}], "name or arguments are not text"),
        ([{"index": i, "function": {"name": "f"}} for i in range(MAX_CALLS + 1)], "more than 128"),
    ],
)
def test_a_bad_call_ends_the_reply_with_a_sentence(parts: list, says: str) -> None:
    with pytest.raises(StreamFault, match=says):
        CallDeltas().add(parts)


def test_tool_calls_must_be_a_list() -> None:
    with pytest.raises(StreamFault, match="tool calls that are not a list"):
        parse_chunk({"choices": [{"delta": {"tool_calls": {"index": 0}}}]})
