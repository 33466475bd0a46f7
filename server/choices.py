"""What one request's n choices have produced, as the client sees it: text, logprobs, final events.

Events of the choices arrive interleaved (``TokenEvent.index``). Logprobs are reported for the
tokens that make the text: a stop token ends a choice without becoming text, so its entry is left
out (OpenAI never shows one). The completions endpoint's ``text_offset`` runs on per choice
across its stream chunks. A chat request with tools parses each choice's calls apart (its own
ToolReply, server/tools.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine import RequestMetrics, TokenEvent, TokenLogprob
from server.logprobs import LogprobShapes
from server.responses import Choice
from server.tools import ToolPlan, ToolReply


class Choices:
    """One request's choices; ``shapes`` None when the request asked for no logprobs."""

    def __init__(
        self,
        n: int,
        chat: bool,
        shapes: LogprobShapes | None,
        stop_ids: frozenset[int],
        tools: ToolPlan | None = None,
    ) -> None:
        self.n = n
        # each choice's tool-call parser (None: its text is the content)
        self.replies = [
            ToolReply(tools) if tools is not None and tools.parses_calls else None for _ in range(n)
        ]
        self._chat = chat
        self._shapes = shapes
        self._stop_ids = stop_ids
        self._offsets = [0] * n  # characters of each choice's text its logprobs covered so far
        self._texts: list[list[str]] = [[] for _ in range(n)]
        self._logprobs: list[list[TokenLogprob]] = [[] for _ in range(n)]
        self.finals: dict[int, TokenEvent] = {}

    def logprobs(self, event: TokenEvent) -> dict[str, Any] | None:
        """The event's logprobs in its endpoint's shape, for a stream chunk (None: not asked for)."""
        if self._shapes is None:
            return None
        return self._shaped(event.index, self._shown(event))

    def add(self, event: TokenEvent) -> None:
        """Collect an event of a reply that is sent whole."""
        self._texts[event.index].append(event.text)
        self._logprobs[event.index] += self._shown(event)
        if event.finished:
            self.finals[event.index] = event

    def choices(self) -> list[Choice]:
        """The collected choices, in index order (after every final event)."""
        return [self._choice(index) for index in range(self.n)]

    def _choice(self, index: int) -> Choice:
        text, reason = "".join(self._texts[index]), self.finals[index].finish_reason
        logprobs = None if self._shapes is None else self._shaped(index, self._logprobs[index])
        reply = self.replies[index]
        if reply is None:
            return Choice(index, text, reason, logprobs)
        reply.feed(text)
        reply.finish()
        content, calls = reply.message()
        return Choice(index, content, reply.finish_reason(reason), logprobs, calls)

    def metrics(self) -> list[RequestMetrics]:
        return [self.finals[index].metrics for index in range(self.n)]

    def _shown(self, event: TokenEvent) -> Sequence[TokenLogprob]:
        entries = event.logprobs
        if event.finish_reason == "stop" and entries and entries[-1].token_id in self._stop_ids:
            return entries[:-1]
        return entries

    def _shaped(self, index: int, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        assert self._shapes is not None
        if self._chat:
            return self._shapes.chat(entries)
        shaped, self._offsets[index] = self._shapes.completion(entries, self._offsets[index])
        return shaped
