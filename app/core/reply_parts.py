"""A reply split into what it is made of: thinking, answer text, and tool calls.

Thinking models (LFM2.5-Thinking) write `<think>…</think>` before the answer, and tool-using
models write `<|tool_call_start|>[f(x=1)]<|tool_call_end|>`. The stored reply keeps these
markers (the chat template needs them to strip past thinking and to show past calls); this
module says which span is which, so the transcript can fold the thinking and label the calls.
It works on partial text too: while a reply streams, the last part is simply still open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

THINK_START, THINK_END = "<think>", "</think>"
TOOL_START, TOOL_END = "<|tool_call_start|>", "<|tool_call_end|>"
MARKERS = (THINK_START, THINK_END, TOOL_START, TOOL_END)
_MARKER = re.compile("|".join(re.escape(m) for m in MARKERS))

Kind = Literal["text", "thinking", "tool_call"]


@dataclass(frozen=True, slots=True)
class Part:
    kind: Kind
    text: str
    closed: bool = True  # False for the part a streaming reply is still writing


def split_reply(text: str) -> list[Part]:
    """The parts of `text` in order; empty text parts are left out.

    A `</think>` with no `<think>` before it closes a thinking part that began at the start: a
    template that opens the thinking in the prompt leaves only the closing tag in the reply.
    """
    if THINK_END in text and THINK_START not in text.split(THINK_END, 1)[0]:
        text = THINK_START + text
    parts: list[Part] = []
    kind: Kind = "text"
    start = 0
    for match in _MARKER.finditer(text):
        marker = match.group()
        opens = {THINK_START: "thinking", TOOL_START: "tool_call"}.get(marker)
        if kind == "text" and opens is not None:
            _add(parts, kind, text[start : match.start()], closed=True)
            kind, start = opens, match.end()  # type: ignore[assignment]
        elif (kind, marker) in (("thinking", THINK_END), ("tool_call", TOOL_END)):
            parts.append(Part(kind, text[start : match.start()], closed=True))
            kind, start = "text", match.end()
        # a marker that closes nothing, or opens inside a block, stays as text
    _add(parts, kind, text[start:], closed=kind == "text")
    return parts


def answer_text(text: str) -> str:
    """The reply without its thinking or markers: what copying "the reply" means."""
    return "".join(part.text for part in split_reply(text) if part.kind != "thinking").strip()


def without_thinking(text: str) -> str:
    """The reply as a server is sent it back: without its thinking, as a reasoning parser took it
    out of the text and as chat templates strip past thinking (the tool calls keep their markers)."""
    if THINK_END not in text:
        return text
    kept = {"text": ("", ""), "tool_call": (TOOL_START, TOOL_END)}
    return "".join(
        kept[p.kind][0] + p.text + kept[p.kind][1] * p.closed for p in split_reply(text) if p.kind in kept
    ).lstrip()


def _add(parts: list[Part], kind: Kind, text: str, closed: bool) -> None:
    if text or kind != "text":
        parts.append(Part(kind, text, closed))
