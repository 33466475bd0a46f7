"""The paced server bench.key_latency streams from: OpenAI-shaped, and as many tokens as asked."""

from __future__ import annotations

import json

import httpx

from bench.paced_server import MODEL, REPLY, PacedServer


def test_it_lists_its_model_and_streams_max_tokens_pieces_of_its_reply_then_done() -> None:
    with PacedServer(rate=1000.0) as server:
        models = httpx.get(f"{server.url}/v1/models").json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        body = {"model": MODEL, "messages": [{"role": "user", "content": "go"}], "max_tokens": 12}
        with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert REPLY.startswith(text) and len(chunks) == 13 and server.sent == 12
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
