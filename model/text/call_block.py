"""The calls of one tool-call block, read as its text grows: the item grammar LFM2 really writes.

The block between ``<|tool_call_start|>`` and ``<|tool_call_end|>`` is a list of Pythonic calls
(``name(key=value, ...)``) or JSON objects (``{"name": ..., "arguments": {...}}``), with the
liberties models take (model/text/tool_calls.py lists them). ``CallBlock`` reads each item once it
can be complete, so a stream pays for every character once; an item it cannot read is skipped and
its siblings kept; depth and size are bounded. Never ``eval`` nor ``ast``: their rules are
Python's, not the model's.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 32  # nesting of lists and objects inside one call's arguments
MAX_BLOCK_CHARS = 2**20  # a block longer than this is not read as calls (max_tokens bounds it far below)


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


class CallBlock:
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
