"""The OpenAI response and stream-chunk shapes, for chat (`chat.completion`) and text (`text_completion`).

One `Shapes` per request holds what every chunk repeats (id, creation time, model); the two
endpoints differ only in the object names and in where the text goes (a message or delta for
chat, `text` for completions). Streams are server-sent events ending in `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from engine import RequestMetrics

SSE_DONE = b"data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying a JSON object, in ASCII: raw U+2028 or U+0085 in model text would
    end the line for clients that split with str.splitlines (httpx's aiter_lines does)."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def usage(metrics: RequestMetrics) -> dict[str, Any]:
    """Token counts of a finished request; cached_tokens are the prompt tokens the prefix cache served."""
    return {
        "prompt_tokens": metrics.prompt_tokens,
        "completion_tokens": metrics.generated_tokens,
        "total_tokens": metrics.prompt_tokens + metrics.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": metrics.cached_prompt_tokens},
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

    def completion(
        self,
        text: str | None,
        finish_reason: str | None,
        metrics: RequestMetrics,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The non-streamed reply; a chat's message carries the calls the model made, if any."""
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message}
            kind = "chat.completion"
        else:
            choice, kind = {"index": 0, "text": text}, "text_completion"
        choice.update(finish_reason=finish_reason, logprobs=None)
        return {**self._envelope(kind, [choice]), "usage": usage(metrics)}

    def chunk(self, text: str, finish_reason: str | None = None, role: bool = False) -> dict[str, Any]:
        """A stream chunk: a text delta; the last one has the finish reason, a chat's first the role."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text or role:
                delta["content"] = text
            return self.delta_chunk(delta, finish_reason)
        return self._choice_chunk({"index": 0, "text": text}, finish_reason)

    def delta_chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """A chat stream chunk with any delta: content, or tool_calls (server/tools.py's)."""
        return self._choice_chunk({"index": 0, "delta": delta}, finish_reason)

    def _choice_chunk(self, choice: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        choice.update(finish_reason=finish_reason, logprobs=None)
        payload = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [choice])
        if self.include_usage:
            payload["usage"] = None
        return payload

    def usage_chunk(self, metrics: RequestMetrics) -> dict[str, Any]:
        """The extra last chunk that stream_options.include_usage asks for: no choices, the usage."""
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._envelope(kind, []), "usage": usage(metrics)}
