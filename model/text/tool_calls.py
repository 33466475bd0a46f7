"""LFM2's tool calls: from the model's text (special tokens kept) to content and calls, whole or streamed.

LFM2 and LFM2.5 answer a tool request with a block between two special tokens::

    I'll check.<|tool_call_start|>[get_weather(city="Paris"), get_time(tz="CET")]<|tool_call_end|>

The list is Pythonic (keyword arguments) or JSON (``{"name": ..., "arguments": {...}}``). What
the models really write, as vLLM's and SGLang's ``lfm2`` parsers learned, also has: ``true`` /
``false`` / ``null`` beside ``True`` / ``False`` / ``None``, parameters named after Python
keywords (``from=1``), dotted names (``files.read``), raw newlines or tabs inside strings,
zero-padded numbers (``month=07``), the body echoed after the end marker (``[f(x=1)]<|tool_call_end|>``
again), and one bad call among good ones. So the block is read by a small parser of its own
(never ``eval``, nor ``ast``, whose rules are Python's, not the model's) that accepts all of these,
bounds the depth and the size, and skips a call it cannot read while keeping its siblings.

One parser serves both ways: ``ToolCallStream`` takes text deltas and gives content deltas and
whole calls as soon as each call's closing parenthesis arrives; ``parse_tool_calls`` feeds it the
whole text at once, so a streamed reply and a whole one always agree. The markers themselves are
never part of the content.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_START = "<|tool_call_start|>"
TOOL_CALL_END = "<|tool_call_end|>"
MAX_DEPTH = 32  # nesting of lists and objects inside one call's arguments
MAX_BLOCK_CHARS = 2**20  # a block longer than this is not read as calls (max_tokens bounds it far below)


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


# ---------------------------------------------------------------------------------------------- reading
class _Malformed(Exception):
    """The text at this point is not a call list item (the item is skipped)."""


class _Incomplete(Exception):
    """The text ends before the item does (wait for more, or give up at the end)."""


_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[A-Za-z_][\w\-]*(?:\s*\.\s*[A-Za-z_][\w\-]*)*")
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_STRING_RUN = {q: re.compile(r"[^\\" + q + "]*") for q in ("'", '"')}
_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", "0": "\0", "/": "/", "\\": "\\"}
_ESCAPES.update({"'": "'", '"': '"', "\n": ""})  # a backslash before a newline continues the line
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class _Reader:
    """Reads one call list item at a time from ``text``; ``pos`` is where it stands."""

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos

    def peek(self) -> str:
        self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
        if self.pos >= len(self.text):
            raise _Incomplete
        return self.text[self.pos]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise _Malformed(f"expected {char!r}")
        self.pos += 1

    def item(self) -> tuple[str, dict[str, Any]]:
        """A Pythonic call ``name(key=value, ...)`` or a JSON ``{"name": ..., "arguments": {...}}``."""
        if self.peek() == "{":
            return _json_call(self.value(0))
        name = self.name()
        self.expect("(")
        arguments: dict[str, Any] = {}
        while self.peek() != ")":
            key = self.name()
            self.expect("=")
            arguments[key] = self.value(1)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != ")":
                raise _Malformed("expected ',' or ')'")
        self.pos += 1
        return name, arguments

    def name(self) -> str:
        self.peek()
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise _Malformed("expected a name")
        self.pos = match.end()
        if self.pos >= len(self.text):  # the name may go on in the next delta
            raise _Incomplete
        return re.sub(r"\s+", "", match.group())

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _Malformed(f"nested deeper than {MAX_DEPTH}")
        char = self.peek()
        if char in "\"'":
            return self.string()
        if char in "[(":
            return self.sequence("]" if char == "[" else ")", depth)
        if char == "{":
            return self.mapping(depth)
        word = re.match(r"[A-Za-z_]\w*", self.text[self.pos : self.pos + 8])
        if word:
            if self.pos + word.end() >= len(self.text):
                raise _Incomplete
            if word.group() not in _WORDS:
                raise _Malformed(f"{word.group()} is not a value")
            self.pos += word.end()
            return _WORDS[word.group()]
        return self.number()

    def sequence(self, close: str, depth: int) -> list[Any]:
        self.pos += 1
        items = []
        while self.peek() != close:
            items.append(self.value(depth + 1))
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != close:
                raise _Malformed(f"expected ',' or {close!r}")
        self.pos += 1
        return items

    def mapping(self, depth: int) -> dict[str, Any]:
        self.pos += 1
        result: dict[str, Any] = {}
        while self.peek() != "}":
            key = self.value(depth + 1)
            if isinstance(key, bool | None | list | dict):
                raise _Malformed("an object key must be a string or a number")
            self.expect(":")
            result[key if isinstance(key, str) else json.dumps(key)] = self.value(depth + 1)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                raise _Malformed("expected ',' or '}'")
        self.pos += 1
        return result

    def number(self) -> int | float:
        match = _NUMBER.match(self.text, self.pos)
        token = match.group() if match else ""
        if not any(c.isdigit() for c in token):
            raise _Malformed("expected a value")
        self.pos += len(token)
        if self.pos >= len(self.text):
            raise _Incomplete
        digits = token.replace("_", "")
        try:
            if re.fullmatch(r"[-+]?\d+", digits):
                return int(digits)  # zero-padded ints too (month=07)
            number = float(digits)
        except ValueError:  # an int of more digits than Python converts
            raise _Malformed(f"{token[:20]}... is too long a number") from None
        if not math.isfinite(number):
            raise _Malformed(f"{token} is not a finite number")
        return number

    def string(self) -> str:
        """A string in single, double or triple quotes; Python's and JSON's escapes; raw control characters
        kept as they are (the model writes multi-line code with real newlines)."""
        text = self.text
        quote = text[self.pos]
        triple = text.startswith(quote * 3, self.pos)
        self.pos += 3 if triple else 1
        parts: list[str] = []
        run = _STRING_RUN[quote]
        while True:
            end = run.match(text, self.pos).end()  # type: ignore[union-attr]
            parts.append(text[self.pos : end])
            self.pos = end
            if end >= len(text):
                raise _Incomplete
            if text[end] == quote:
                if not triple or text.startswith(quote * 3, end):
                    self.pos = end + (3 if triple else 1)
                    return _join_surrogates("".join(parts))
                parts.append(quote)
                self.pos = end + 1
                continue
            parts.append(self.escape())

    def escape(self) -> str:
        text, at = self.text, self.pos + 1
        if at >= len(text):
            raise _Incomplete
        code = text[at]
        if code in _HEX_ESCAPES:
            width = _HEX_ESCAPES[code]
            digits = text[at + 1 : at + 1 + width]
            if len(digits) < width and at + 1 + len(digits) >= len(text):
                raise _Incomplete
            if len(digits) == width and re.fullmatch(r"[0-9a-fA-F]+", digits) and int(digits, 16) <= 0x10FFFF:
                self.pos = at + 1 + width
                return chr(int(digits, 16))
            raise _Malformed(f"a bad \\{code} escape")
        self.pos = at + 1
        return _ESCAPES.get(code, "\\" + code)  # an unknown escape stays as written, as in Python


def _join_surrogates(text: str) -> str:
    """JSON spells a character beyond U+FFFF as two escaped surrogates: make them the one character."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return joined


def _json_call(value: Any) -> tuple[str, dict[str, Any]]:
    """``{"name": ..., "arguments": {...}}`` (or "parameters", or arguments as a JSON string)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise _Malformed("a JSON call needs a name")
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise _Malformed("arguments is not JSON") from None
    if not isinstance(arguments, dict):
        raise _Malformed("arguments must be an object")
    return value["name"], arguments


def _skip_item(text: str, pos: int) -> int:
    """Where the item at ``pos`` ends: the next ',' or closing ']' outside brackets and strings.

    A bad call is dropped this way and its siblings kept; _Incomplete if the text ends first.
    """
    depth, quote = 0, ""
    while pos < len(text):
        char = text[pos]
        if quote:
            if char == "\\":
                pos += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")}" or (char == "]" and depth > 0):
            depth = max(0, depth - 1)
        elif depth == 0 and char in ",]":
            return pos
        pos += 1
    raise _Incomplete


class _Block:
    """The calls of one block, read as its text grows: each item is read once it can be complete."""

    def __init__(self) -> None:
        self.text = ""
        self.pos = 0  # where the next item starts
        self.opened = False  # the block began with '[' (a bare call or JSON object otherwise)
        self.closed = False  # the list ended: the rest of the block is ignored
        self.calls = 0

    def add(self, delta: str, final: bool) -> list[tuple[str, dict[str, Any]]]:
        """The items this text completes; ``final`` when the block's text is whole."""
        self.text += delta
        if len(self.text) > MAX_BLOCK_CHARS:
            self.closed = True
        if not final and not any(c in delta for c in ")}],"):
            return []  # no item can have ended in this delta: skip the scan (long strings stay linear)
        found = []
        while not self.closed:
            try:
                found += self._next(final)
            except _Incomplete:
                if final:
                    self.closed = True
                break
        return found

    def _next(self, final: bool) -> list[tuple[str, dict[str, Any]]]:
        """The next item (none if it is malformed: skipped); _Incomplete while it may still grow."""
        reader = _Reader(self.text, self.pos)
        if self.pos == 0:
            self.opened = reader.peek() == "["
            reader.pos += self.opened
        start = reader.pos
        if self.opened and reader.peek() == "]":
            self.closed = True
            return []
        try:
            calls = [reader.item()]
            separator = self._separator(reader, final)
            if self.opened and separator not in ",]":
                raise _Malformed("expected ',' or ']' after a call")
        except _Malformed:
            calls, reader.pos = [], _skip_item(self.text, start)
            separator = self._separator(reader, final)
        self.pos = reader.pos + 1
        self.closed = separator != ","
        self.calls += len(calls)
        return calls

    @staticmethod
    def _separator(reader: _Reader, final: bool) -> str:
        """What follows an item: ',' or ']', something else, or "" where a whole block ends."""
        try:
            return reader.peek()
        except _Incomplete:
            if final:
                return ""
            raise


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
        self._block: _Block | None = _Block() if in_block else None
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
            self._block = _Block()
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
