"""The OpenAI response and stream-chunk shapes, for chat (`chat.completion`) and text (`text_completion`).

One `Shapes` per request holds what every chunk repeats (id, creation time, model); the two
endpoints differ only in the object names and in where the text goes (a message or delta for
chat, `text` for completions). Streams are server-sent events ending in `data: [DONE]`. A request
of n choices streams each choice's chunks with its `index`; its usage counts the prompt once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine import RequestMetrics

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object, in ASCII: raw U+2028 or U+0085 in model text would
    end the line for clients that split with str.splitlines (httpx's aiter_lines does)."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass(slots=True)
class Choice:
    """One finished choice of a non-streamed reply."""

    index: int
    text: str | None  # None: a chat message that is only tool calls
    finish_reason: str | None
    logprobs: dict[str, Any] | None = None  # already in the endpoint's shape
    tool_calls: list[dict[str, Any]] | None = None  # a chat message's calls (server/tools.py's)


def usage(choices: Sequence[RequestMetrics]) -> dict[str, Any]:
    """Token counts of a finished request, given each choice's metrics (index 0 first): the prompt,
    read once, and its cached_tokens (those the prefix cache served) as the first choice's; the
    completion tokens of all choices."""
    first = choices[0]
    generated = sum(metrics.generated_tokens for metrics in choices)
    return {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": first.prompt_tokens + generated,
        "prompt_tokens_details": {"cached_tokens": first.cached_prompt_tokens},
    }


class Shapes:
    """Builds one request's response objects: the whole reply, or its stream's chunks."""

    def __init__(self, model: str, chat: bool, include_usage: bool = False) -> None:
        self.chat = chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage  # then every chunk has "usage": null, as OpenAI sends

    def _envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def completion(self, choices: Sequence[Choice], metrics: Sequence[RequestMetrics]) -> dict[str, Any]:
        """The non-streamed reply: its choices (a chat's message carries the calls the model made, if
        any), and the usage of their metrics."""
        shaped = []
        for choice in choices:
            if self.chat:
                message: dict[str, Any] = {"role": "assistant", "content": choice.text}
                if choice.tool_calls:
                    message["tool_calls"] = choice.tool_calls
                body: dict[str, Any] = {"message": message}
            else:
                body = {"text": choice.text}
            shaped.append(
                {
                    "index": choice.index,
                    **body,
                    "finish_reason": choice.finish_reason,
                    "logprobs": choice.logprobs,
                }
            )
        kind = "chat.completion" if self.chat else "text_completion"
        return {**self._envelope(kind, shaped), "usage": usage(metrics)}

    def chunk(
        self,
        text: str,
        finish_reason: str | None = None,
        role: bool = False,
        index: int = 0,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A stream chunk of choice ``index``: a text delta (with its tokens' logprobs, when asked for);
        the last one has the finish reason, a chat's first the role."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text or role:
                delta["content"] = text
            return self.delta_chunk(delta, finish_reason, index, logprobs)
        return self._choice_chunk({"index": index, "text": text}, finish_reason, logprobs)

    def delta_chunk(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        index: int = 0,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A chat stream chunk of choice ``index``: any delta, content or tool_calls (server/tools.py)."""
        return self._choice_chunk({"index": index, "delta": delta}, finish_reason, logprobs)

    def _choice_chunk(
        self, choice: dict[str, Any], finish_reason: str | None, logprobs: dict[str, Any] | None
    ) -> dict[str, Any]:
        choice.update(finish_reason=finish_reason, logprobs=logprobs)
        payload = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])
        if self.include_usage:
            payload["usage"] = None
        return payload

    def usage_chunk(self, metrics: Sequence[RequestMetrics]) -> dict[str, Any]:
        """The extra last chunk that stream_options.include_usage asks for: no choices, the usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._envelope(kind, []), "usage": usage(metrics)}
