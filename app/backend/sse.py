"""A chat completion's server-sent events, read from bytes we do not trust.

Lines are split here rather than by httpx's `aiter_lines`, which buffers a line with no end in
memory for as long as the server sends it: a line longer than LINE_BYTES ends the reply instead.
Each `data:` line must be a chunk of the shape OpenAI documents; anything else (garbage, a
`choices` that is not a list, content that is not text, invalid UTF-8, JSON nested too deep) is a
StreamFault whose message is one sentence for the pane, and the reply ends there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.backend.server_text import server_text

LINE_BYTES = 1 << 20  # one SSE line, so one chunk: 1 MiB (a chunk is normally a token or a few)
MAX_COUNT = 10**9  # a usage figure beyond this is not a token count


class StreamFault(Exception):
    """The server sent something that is not a chat completion stream: the message says what."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int | None


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one `data:` line adds: text, maybe a finish reason, maybe the usage figures; `done`
    for the `data: [DONE]` line that ends the stream. `reasoning`: thinking a server's reasoning
    parser took out of the text (vLLM, llama-server: `reasoning_content`, newer vLLM: `reasoning`)."""

    text: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False
    tool_calls: list[Any] | None = None  # the delta's tool-call parts, unchecked (tool_deltas.py)
    reasoning: str = ""


class LineSplitter:
    """Bytes in, whole lines out (without their line ending), never more than `cap` bytes held."""

    def __init__(self, cap: int = LINE_BYTES) -> None:
        self.cap = cap
        self._partial = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines `data` completes; only `data` is searched, so a line fed a byte at a time
        costs no more than one fed at once. Split in C: a chunk of a million empty lines (a gzip
        bomb's cheapest payload) costs milliseconds, not seconds of a Python loop."""
        *lines, rest = data.split(b"\n")
        if lines:
            self._take(lines[0])
            if max(map(len, lines)) > self.cap:
                self._too_long()
            if b"\r" in data:  # CRLF endings: a Python pass over the lines only then
                lines = [line.removesuffix(b"\r") for line in lines]
            lines[0] = bytes(self._partial).removesuffix(b"\r")  # its \r may have come in an earlier piece
            self._partial.clear()
        self._take(rest)
        return lines

    def _take(self, piece: bytes) -> None:
        if len(self._partial) + len(piece) > self.cap:
            self._too_long()
        self._partial += piece

    def _too_long(self) -> None:
        raise StreamFault(f"the server sent a line longer than {self.cap / (1 << 20):g} MiB")


def parse_line(line: bytes) -> Chunk | None:
    """The chunk a line carries; None for lines that carry none (blank, comments, `event:`)."""
    if not line.startswith(b"data:"):
        return None
    try:
        data = line[5:].decode("utf-8").strip()
        if data == "[DONE]":
            return Chunk(done=True)
        chunk = json.loads(data)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep to parse
        said = server_text(line.decode("utf-8", "replace"), 80)
        raise StreamFault(f"the server sent a line that is not a JSON chunk: {said}") from None
    return parse_chunk(chunk)


def parse_chunk(chunk: Any) -> Chunk:
    """Check `chunk` has the shape of a chat.completion.chunk and take what the pane shows."""
    if not isinstance(chunk, dict):
        raise StreamFault(f"the server sent a chunk that is not an object: {server_text(chunk, 80)}")
    if "error" in chunk:
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise StreamFault(f"the server reported an error: {server_text(message)}")
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise StreamFault("the server sent a chunk whose choices are not a list of objects")
    choice = choices[0] if choices else {}
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise StreamFault("the server sent a chunk whose delta is not an object")
    calls = delta.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise StreamFault("the server sent tool calls that are not a list")
    content, reason = _content(delta.get("content")), _finish_reason(choice.get("finish_reason"))
    reasoning = _content(delta.get("reasoning_content")) or _content(delta.get("reasoning"))
    return Chunk(content, reason, _usage(chunk), tool_calls=calls, reasoning=reasoning)


def _content(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    raise StreamFault(f"the server sent reply text that is not text but a {type(content).__name__}")


def _finish_reason(reason: Any) -> str | None:
    """ "length" says the reply was cut; any other reason (stop, eos, content_filter) is an ending."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise StreamFault(f"the server sent a finish reason that is not text but a {type(reason).__name__}")
    return "length" if reason == "length" else "stop"


def _usage(chunk: dict[str, Any]) -> Usage | None:
    """The usage figures when they are counts; anything else is ignored (they are only shown)."""
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = (details.get("cached_tokens") if isinstance(details, dict) else 0) or 0
    prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens")
    if not (_is_count(prompt) and _is_count(cached) and (completion is None or _is_count(completion))):
        return None
    return Usage(prompt, cached, completion)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
