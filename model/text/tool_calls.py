"""LFM2's tool calls: from the model's text (special tokens kept) to content and calls, whole or streamed.

LFM2 and LFM2.5 answer a tool request with a block between two special tokens::

    I'll check.<|tool_call_start|>[get_weather(city="Paris"), get_time(tz="CET")]<|tool_call_end|>

The list is Pythonic (keyword arguments) or JSON (``{"name": ..., "arguments": {...}}``). What
the models really write, as vLLM's and SGLang's ``lfm2`` parsers learned, also has: ``true`` /
``false`` / ``null`` beside ``True`` / ``False`` / ``None``, parameters named after Python
keywords (``from=1``), dotted names (``files.read``), raw newlines or tabs inside strings,
zero-padded numbers (``month=07``), the body echoed after the end marker (``[f(x=1)]<|tool_call_end|>``
again), and one bad call among good ones. So the block is read by a small parser of its own
(model/text/call_block.py) that accepts all of these, bounds the depth and the size, and skips a
call it cannot read while keeping its siblings.

One parser serves both ways: ``ToolCallStream`` takes text deltas and gives content deltas and
whole calls as soon as each call's closing parenthesis arrives; ``parse_tool_calls`` feeds it the
whole text at once, so a streamed reply and a whole one always agree. The markers themselves are
never part of the content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from model.text.call_block import CallBlock

TOOL_CALL_START = "<|tool_call_start|>"
TOOL_CALL_END = "<|tool_call_end|>"


def new_call_id() -> str:
    """An OpenAI-style call id (``call_`` and 24 hex digits), unique per call."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made: ``arguments`` is a JSON object's text, as OpenAI sends it."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    @property
    def argument_values(self) -> dict[str, Any]:
        return json.loads(self.arguments)


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A whole reply: its text without the call blocks (None when empty beside calls), and the calls."""

    content: str | None
    tool_calls: list[ToolCall]


# ---------------------------------------------------------------------------------------------- streaming
@dataclass(frozen=True, slots=True)
class IndexedCall:
    """A call as a stream reports it: its position among the reply's calls (OpenAI's ``index``)."""

    index: int
    call: ToolCall


def _held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of ``text`` could begin ``marker`` (held back until they cannot)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class ToolCallStream:
    """Content and calls from a reply's text deltas, each as soon as it is certain.

    ``feed`` and ``finish`` return a list of events: a ``str`` is content to show, an
    ``IndexedCall`` a whole call. Content before a block and after it streams as it comes, less
    the markers; whitespace around a block is dropped, and content on both sides of it is joined
    by a newline (as vLLM joins them). After a block, text that starts with '['
    is held until it proves to be the echoed body (an orphan end marker follows: dropped) or not
    (the reply ends, or a new block starts: then it is content). A block none of whose items
    reads as a call is content too. ``in_block=True`` starts inside a block: a reply whose calls
    come without markers (the output of a ``tool_choice`` constraint).
    """

    def __init__(self, in_block: bool = False) -> None:
        self._held = ""  # text not yet given out: it may begin a marker, or be trailing whitespace
        self._block: CallBlock | None = CallBlock() if in_block else None
        self._after_block = False  # just past a block: leading whitespace and an echo are dropped
        self._echo: str | None = None  # text after a block that began with '[', held
        self._gap = ""  # whitespace before the open block: dropped if it holds calls, else content
        self._shown = False  # some content was given out (text after a block then starts a new line)
        self.calls: list[ToolCall] = []

    def feed(self, delta: str) -> list[str | IndexedCall]:
        return self._consume(delta, final=False)

    def finish(self) -> list[str | IndexedCall]:
        """The end of the reply: whatever was held becomes content or calls."""
        return self._consume("", final=True)

    def _consume(self, delta: str, final: bool) -> list[str | IndexedCall]:
        events: list[str | IndexedCall] = []
        pending: str | None = self._held + delta
        self._held = ""
        while pending is not None:
            if self._block is not None:
                pending = self._in_block(pending, final, events)
            elif self._echo is not None:
                pending = self._in_echo(pending, final, events)
            else:
                pending = self._in_content(pending, final, events)
        events = [event for event in events if event != ""]
        self._shown = self._shown or any(isinstance(event, str) for event in events)
        return events

    def _hold(self, text: str, markers: tuple[str, ...], keep_space: bool) -> str:
        """``text`` less a tail held back for the next delta (a marker's beginning, trailing space)."""
        keep = max(_held_prefix(text, marker) for marker in markers)
        if keep_space:  # and the whitespace before it, dropped if a block follows
            body = text[: len(text) - keep]
            keep += len(body) - len(body.rstrip())
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def _in_content(self, text: str, final: bool, events: list[str | IndexedCall]) -> str | None:
        if self._after_block:
            text = text.lstrip()
            if not text:
                return None
            self._after_block = False
            if text.startswith("[") and self.calls:
                self._echo = ""
                return text
            if self._shown or any(isinstance(event, str) and event for event in events):
                events.append("\n")
        start = text.find(TOOL_CALL_START)
        if start >= 0:
            before = text[:start].rstrip()
            events.append(_clean(before))
            self._gap = text[len(before) : start]
            self._block = CallBlock()
            return text[start + len(TOOL_CALL_START) :]
        if final:
            events.append(_clean(text.rstrip() if self.calls else text))
        else:
            events.append(_clean(self._hold(text, (TOOL_CALL_START, TOOL_CALL_END), keep_space=True)))
        return None

    def _in_block(self, text: str, final: bool, events: list[str | IndexedCall]) -> str | None:
        block = self._block
        assert block is not None
        end = text.find(TOOL_CALL_END)
        rest = None
        if end >= 0:
            text, rest = text[:end], text[end + len(TOOL_CALL_END) :]
        elif not final:
            text = self._hold(text, (TOOL_CALL_END,), keep_space=False)
        for name, arguments in block.add(text, final=final or rest is not None):
            call = ToolCall(name, json.dumps(arguments, ensure_ascii=False))
            events.append(IndexedCall(len(self.calls), call))
            self.calls.append(call)
        if rest is None and not final:
            return None
        self._block = None
        self._after_block = block.calls > 0
        if not block.calls:  # nothing in it read as a call: the model's text, shown as it wrote it
            events.append(_clean(self._gap + block.text))
        return rest

    def _in_echo(self, text: str, final: bool, events: list[str | IndexedCall]) -> str | None:
        echo = (self._echo or "") + text
        seen = max(0, len(echo) - len(text) - len(TOOL_CALL_START))  # markers end in the new text
        end, start = echo.find(TOOL_CALL_END, seen), echo.find(TOOL_CALL_START, seen)
        if end >= 0 and not 0 <= start < end:  # the echoed body and its orphan end marker: dropped
            self._echo = None
            self._after_block = True
            return echo[end + len(TOOL_CALL_END) :]
        if final or start >= 0:  # not an echo after all (the reply ends, a new block starts): content
            self._echo = None
            return echo
        self._echo = echo
        return None


def _clean(text: str) -> str:
    """Content never shows a marker (a stray end marker, a start marker's remains)."""
    return text.replace(TOOL_CALL_END, "").replace(TOOL_CALL_START, "")


def parse_tool_calls(text: str, in_block: bool = False) -> ParsedReply:
    """A whole reply's content and calls (what the stream of the same text gives, joined)."""
    stream = ToolCallStream(in_block)
    events = stream.feed(text) + stream.finish()
    content = "".join(e for e in events if isinstance(e, str))
    return ParsedReply(content if content or not stream.calls else None, stream.calls)


# ---------------------------------------------------------------------------------------------- rendering
def _python_literal(value: Any) -> str:
    """A JSON value as a Python literal (what LFM2.5's template writes for past calls)."""
    if value is None or isinstance(value, bool):
        return {None: "None", True: "True", False: "False"}[value]
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def calls_schema(parameters: Mapping[str, Mapping[str, Any]], parallel: bool = True) -> dict[str, Any]:
    """The JSON schema of a bare call list (``[{"name", "parameters"}, ...]``) of these functions (name ->
    parameters schema): what a reply that must call a tool (OpenAI's ``tool_choice="required"``) is
    constrained to, as vLLM does; ``ToolCallStream(in_block=True)`` reads it."""
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "parameters": dict(schema)},
            "required": ["name", "parameters"],
            "additionalProperties": False,
        }
        for name, schema in parameters.items()
    ]
    array: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if not parallel:
        array["maxItems"] = 1
    return array


def render_tool_calls(calls: Iterable[tuple[str, Mapping[str, Any]]], style: str = "python") -> str:
    """A call block as LFM2 writes it: Pythonic (``style="python"``) or a JSON list (``"json"``)."""
    if style == "json":
        body = json.dumps([{"name": n, "arguments": dict(a)} for n, a in calls], ensure_ascii=False)
    else:
        rendered = (f"{n}({', '.join(f'{k}={_python_literal(v)}' for k, v in a.items())})" for n, a in calls)
        body = "[" + ", ".join(rendered) + "]"
    return TOOL_CALL_START + body + TOOL_CALL_END
