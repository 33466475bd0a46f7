"""The response shapes, without HTTP: what OpenAI's clients parse."""

from __future__ import annotations

import json

from engine import RequestMetrics
from server.responses import Choice, Shapes, sse

METRICS = RequestMetrics(arrival_time=0.0, prompt_tokens=40, cached_prompt_tokens=32, generated_tokens=5)


def test_an_event_is_one_line_whatever_the_model_wrote() -> None:
    text = "a\u2028b\x85c\u2029d\ne\rf\x1cg"
    event = sse(Shapes("m", chat=True).chunk(text))
    assert event.endswith(b"\n\n") and len(event.decode()[:-2].splitlines()) == 1
    assert json.loads(event[len(b"data: ") :])["choices"][0]["delta"]["content"] == text


def test_chat_and_text_shapes() -> None:
    chat, text = Shapes("m", chat=True), Shapes("m", chat=False, include_usage=True)
    assert chat.id.startswith("chatcmpl-") and text.id.startswith("cmpl-")
    reply = chat.completion([Choice(0, "hi", "stop")], [METRICS])
    assert reply["object"] == "chat.completion"
    assert reply["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert reply["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 5,
        "total_tokens": 45,
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    assert chat.chunk("", role=True)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chat.chunk("", "length")["choices"][0] == {
        "index": 0,
        "delta": {},
        "finish_reason": "length",
        "logprobs": None,
    }
    chunk = text.chunk("x")
    assert chunk["object"] == "text_completion" and chunk["usage"] is None
    assert chunk["choices"][0]["text"] == "x"
    last = text.usage_chunk([METRICS])
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 45
