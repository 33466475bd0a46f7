"""A server's streamed tool calls (OpenAI's `delta.tool_calls`), put back together as the text of an
LFM2 call block, so a reply from a server reads as one from the local engine: the same parser
(engine.ToolCallStream) finds its calls whichever backend made it.

    {"index": 0, "id": "call_1", "function": {"name": "now", "arguments": ""}}
    {"index": 0, "function": {"arguments": "{}"}}
      -> <|tool_call_start|>[{"name": "now", "arguments": "{}"}]<|tool_call_end|>

The parts come from the server: their shape is checked (a StreamFault says what is wrong) and
their size bounded, as the reply's text is.
"""

from __future__ import annotations

import json
from typing import Any

from app.backend.sse import StreamFault

MAX_CALLS = 128
CALL_START, CALL_END = "<|tool_call_start|>", "<|tool_call_end|>"


class CallDeltas:
    """The calls of one reply so far, by index; `size` counts their characters for the reply's cap."""

    def __init__(self) -> None:
        self._calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]
        self.size = 0

    def add(self, parts: list[Any]) -> None:
        for part in parts:
            index = part.get("index", 0) if isinstance(part, dict) else None
            function = part.get("function") or {} if isinstance(part, dict) else None
            if not isinstance(index, int) or not isinstance(function, dict):
                raise StreamFault("the server sent a tool call that is not {index, function: {...}}")
            name, arguments = function.get("name") or "", function.get("arguments") or ""
            if not isinstance(name, str) or not isinstance(arguments, str):
                raise StreamFault("the server sent a tool call whose name or arguments are not text")
            if index not in self._calls and len(self._calls) >= MAX_CALLS:
                raise StreamFault(f"the server sent more than {MAX_CALLS} tool calls in one reply")
            call = self._calls.setdefault(index, ["", ""])
            call[0] += name
            call[1] += arguments
            self.size += len(name) + len(arguments)

    def as_text(self) -> str:
        """The calls as an LFM2 block ("" when there are none)."""
        if not self._calls:
            return ""
        calls = [{"name": name, "arguments": args or "{}"} for _, (name, args) in sorted(self._calls.items())]
        return CALL_START + json.dumps(calls, ensure_ascii=False) + CALL_END
