"""LFM2's tool-call blocks parse into content and calls, whole and streamed, as the peers' parsers do.

The table holds what the models write and what the peers' trackers recorded as failures (the
repairs their ``lfm2`` parsers needed); every row is also streamed one character at a time and in
one piece, and must give the same content and calls. The property test renders any list of calls
(Pythonic and JSON) and reads it back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.text.call_block import MAX_DEPTH
from model.text.tool_calls import (
    TOOL_CALL_END,
    TOOL_CALL_START,
    IndexedCall,
    ToolCallStream,
    parse_tool_calls,
    render_tool_calls,
)

S, E = TOOL_CALL_START, TOOL_CALL_END
Calls = list[tuple[str, dict[str, Any]]]
PARIS = [("get_weather", {"city": "Paris"})]

# (model output, expected content, expected calls)
TABLE: dict[str, tuple[str, str | None, Calls]] = {
    "plain text": ("Paris is sunny.", "Paris is sunny.", []),
    "text keeps its spacing": ("  two  spaces \n", "  two  spaces \n", []),
    "one call": (f'{S}[get_weather(city="Paris")]{E}', None, PARIS),
    "text before": (
        f'Checking. {S}[get_weather(city="Paris")]{E}',
        "Checking.",
        [("get_weather", {"city": "Paris"})],
    ),
    "text after": (f"{S}[now()]{E}\nIt is noon.", "It is noon.", [("now", {})]),
    "several calls": (
        f'{S}[get_weather(city="Paris", days=2), now(tz="CET")]{E}',
        None,
        [("get_weather", {"city": "Paris", "days": 2}), ("now", {"tz": "CET"})],
    ),
    "json list": (
        S + '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "now", "arguments": {}}]' + E,
        None,
        [*PARIS, ("now", {})],
    ),
    "json parameters and string arguments": (
        f'{S}[{{"name": "a", "parameters": {{"x": 1}}}}, {{"name": "b", "arguments": "{{\\"y\\": 2}}"}}]{E}',
        None,
        [("a", {"x": 1}), ("b", {"y": 2})],
    ),
    "json and python literals": (
        f"{S}[f(a=true, b=false, c=null, d=True, e=False, f=None)]{E}",
        None,
        [("f", {"a": True, "b": False, "c": None, "d": True, "e": False, "f": None})],
    ),
    "nested values": (
        f"{S}[f(items=[1, -2.5, 'x', (3, 4)], opts={{'k': [None], 2: \"two\"}})]{E}",
        None,
        [("f", {"items": [1, -2.5, "x", [3, 4]], "opts": {"k": [None], "2": "two"}})],
    ),
    "keyword-named parameters": (
        f'{S}[memory_get(from=1, in="x", class="y", lambda=2)]{E}',
        None,
        [("memory_get", {"from": 1, "in": "x", "class": "y", "lambda": 2})],
    ),
    "dotted and dashed names": (
        f'{S}[files.read(path="a.txt"), web-search(q="lfm")]{E}',
        None,
        [("files.read", {"path": "a.txt"}), ("web-search", {"q": "lfm"})],
    ),
    "control characters inside strings": (
        f"{S}[run(cmd=\"ls\n\tcd /\r\x00\", note='a\x01b')]{E}",
        None,
        [("run", {"cmd": "ls\n\tcd /\r\x00", "note": "a\x01b"})],
    ),
    "escapes": (
        f"{S}[f(s=\"q\\\"uote\\\\ \\n \\u00e9 \\ud83d\\ude00 \\x41\", t='it\\'s')]{E}",
        None,
        [("f", {"s": 'q"uote\\ \n é 😀 A', "t": "it's"})],
    ),
    "triple quotes": (f'{S}[write(code="""a = "1"\nb""")]{E}', None, [("write", {"code": 'a = "1"\nb'})]),
    "zero-padded ints": (f"{S}[date(month=07, day=001)]{E}", None, [("date", {"month": 7, "day": 1})]),
    "echoed body after the end marker": (
        f'{S}[get_weather(city="Paris")]{E}[get_weather(city="Paris")]{E}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "echo then prose": (f"{S}[now()]{E} [now()]{E} Noon.", "Noon.", [("now", {})]),
    "text on both sides": (f"Hm {S}[now()]{E}  Done.", "Hm\nDone.", [("now", {})]),
    "one bad call among good ones": (
        f'{S}[a(x=1), b(1, 2), c(y=eval("x")), d(z="ok")]{E}',
        None,
        [("a", {"x": 1}), ("d", {"z": "ok"})],
    ),
    "a bad call with brackets in strings": (
        f'{S}[bad(x=")]", 3), good(y="],")]{E}',
        None,
        [("good", {"y": "],"})],
    ),
    "no end marker (stopped at eos)": (
        f'{S}[get_weather(city="Paris")]',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "bare call without brackets": (
        f'{S}get_weather(city="Paris"){E}',
        None,
        [("get_weather", {"city": "Paris"})],
    ),
    "spaces inside the block": (
        f'{S} [ get_weather ( city = "Paris" ) , now( ) ] {E}',
        None,
        [*PARIS, ("now", {})],
    ),
    "trailing comma": (f"{S}[f(x=1,),]{E}", None, [("f", {"x": 1})]),
    "empty list is no call": (f"Hm {S}[]{E} ok", "Hm [] ok", []),
    "unreadable block is content": (f"A {S}not a call{E} B", "A not a call B", []),
    "cut off inside a string": (f'Try {S}[f(x="unterminated', 'Try [f(x="unterminated', []),
    "stray end marker": (f"Hello{E} world", "Hello world", []),
    "a second block": (f"{S}[a()]{E} and {S}[b()]{E} end", "and\nend", [("a", {}), ("b", {})]),
    "infinite number": (f"{S}[f(x=1e999), g(y=1)]{E}", None, [("g", {"y": 1})]),
    "thinking before the call": (
        f"<think>user wants weather</think>{S}[w(c=1)]{E}",
        "<think>user wants weather</think>",
        [("w", {"c": 1})],
    ),
}


def _stream(text: str, size: int) -> tuple[str | None, Calls]:
    stream = ToolCallStream()
    events: list[str | IndexedCall] = []
    for start in range(0, len(text), size):
        events += stream.feed(text[start : start + size])
    events += stream.finish()
    calls = [e for e in events if isinstance(e, IndexedCall)]
    assert [c.index for c in calls] == list(range(len(calls)))
    content = "".join(e for e in events if isinstance(e, str))
    return content or (None if calls else ""), [(c.call.name, c.call.argument_values) for c in calls]


@pytest.mark.parametrize("case", TABLE)
def test_the_table_parses_whole_and_streamed(case: str) -> None:
    text, content, calls = TABLE[case]
    reply = parse_tool_calls(text)
    assert (reply.content, [(c.name, c.argument_values) for c in reply.tool_calls]) == (content, calls)
    for call in reply.tool_calls:
        assert call.id.startswith("call_") and json.loads(call.arguments) == call.argument_values
    assert len({c.id for c in reply.tool_calls}) == len(reply.tool_calls)
    for size in (1, 3, len(text) or 1):
        assert _stream(text, size) == (content, calls)


def test_a_call_streams_as_soon_as_its_parenthesis_closes() -> None:
    stream = ToolCallStream()
    assert stream.feed("Sure") == ["Sure"]
    assert stream.feed(f" {S}[a(x=") == []
    [first] = stream.feed("1), b(")
    assert isinstance(first, IndexedCall) and (first.index, first.call.name) == (0, "a")
    [second] = stream.feed(f"y=2)]{E}")
    assert isinstance(second, IndexedCall) and (second.index, second.call.arguments) == (1, '{"y": 2}')
    assert stream.finish() == []


def test_markers_split_across_deltas_never_show() -> None:
    text = f'Hi {S}[f(x="a")]{E} bye'
    pieces = [text[:5], text[5:12], text[12:30], text[30:36], text[36:]]
    stream = ToolCallStream()
    events = [e for piece in pieces for e in stream.feed(piece)] + stream.finish()
    content = "".join(e for e in events if isinstance(e, str))
    assert content == "Hi\nbye"
    assert "<|" not in content


def test_constrained_output_parses_without_markers() -> None:
    """tool_choice="required" constrains the reply to a JSON list of {name, parameters}: read as a block."""
    reply = parse_tool_calls('[{"name": "get_weather", "parameters": {"city": "Paris"}}]', in_block=True)
    assert reply.content is None
    assert [(c.name, c.argument_values) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_depth_and_size_are_bounded() -> None:
    deep = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    reply = parse_tool_calls(f"{S}[f(x={deep}), g(y=1)]{E}")
    assert [c.name for c in reply.tool_calls] == ["g"]
    huge = parse_tool_calls(f"{S}[f(x={'9' * 5000})]{E}")  # more digits than int() converts
    assert huge.tool_calls == []


def test_a_long_string_argument_streams_in_linear_time() -> None:
    stream = ToolCallStream()
    stream.feed(f'{S}[write(text="')
    for _ in range(20_000):  # would be ~4e8 character reads if each delta rescanned the block
        assert stream.feed("abcdefgh ") == []
    [call] = stream.feed(f'")]{E}')
    assert isinstance(call, IndexedCall) and len(call.call.argument_values["text"]) == 180_000


_KEYS = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Z", "Cc")), max_size=8)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8"), max_size=20)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=10,
)
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}(\.[A-Za-z_][A-Za-z0-9_]{0,5})?", fullmatch=True)
_PARAMS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
_CALLS = st.lists(st.tuples(_NAMES, st.dictionaries(_PARAMS, _VALUES, max_size=4)), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(calls=_CALLS, style=st.sampled_from(["python", "json"]), before=st.sampled_from(["", "Ok. "]))
def test_any_call_list_round_trips_through_render_and_parse(calls: Calls, style: str, before: str) -> None:
    text = before + render_tool_calls(calls, style)
    reply = parse_tool_calls(text)
    expected = [(name, json.loads(json.dumps(args))) for name, args in calls]
    assert [(c.name, c.argument_values) for c in reply.tool_calls] == expected
    assert reply.content == (before.strip() or None)
    assert _stream(text, 2) == (before.strip() or None, expected)


def test_an_echo_is_told_from_a_new_block_whatever_the_deltas() -> None:
    text = f"{S}[a()]{E}[a()]{S}[b()]{E}"
    for size in range(1, len(text) + 1):
        assert _stream(text, size) == ("[a()]", [("a", {}), ("b", {})])


_PIECES = [
    S,
    E,
    "[",
    "]",
    "(",
    ")",
    "f",
    "g.h",
    "x=1",
    'y="a b"',
    ",",
    " ",
    "\n",
    '"',
    "{",
    "}",
    '"name": "n"',
    ":",
]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=25), size=st.integers(1, 8))
def test_any_text_streamed_in_any_pieces_reads_as_the_whole(pieces: list[str], size: int) -> None:
    """Whatever the model writes, a stream and a whole reply agree, and no marker reaches the content."""
    text = "".join(pieces)
    whole = parse_tool_calls(text)
    content, calls = _stream(text, size)
    assert content == whole.content and "<|" not in (content or "")
    assert calls == [(c.name, c.argument_values) for c in whole.tool_calls]
