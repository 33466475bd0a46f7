"""Bad requests get the right status and an OpenAI error object, and the server goes on serving."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.server.conftest import MODEL
from tests.server.helpers import idle
from tests.waiting import wait_for

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
# seconds /health may take while huge prompts are refused: far under the tens of seconds the
# tokenizer held the event loop for without the byte bound, far over what it takes on a busy
# machine (the senders are threads of this process, sharing its GIL with the server)
HEALTH_BOUND = 10


def assert_still_serving(url: str) -> None:
    reply = httpx.post(f"{url}{CHAT}", json={"messages": HELLO, "max_tokens": 2, "temperature": 0})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["role"] == "assistant"


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": HELLO, "temperature": -1}, "temperature"),
        ({"messages": HELLO, "temperature": "hot"}, "temperature"),
        ({"messages": HELLO, "top_p": 0}, "top_p"),
        ({"messages": HELLO, "top_k": -2}, "top_k"),
        ({"messages": HELLO, "presence_penalty": 3}, "presence_penalty"),
        ({"messages": HELLO, "seed": -1}, "seed"),
        ({"messages": HELLO, "stop": ["x"] * 17}, "stop"),
        ({"messages": HELLO, "stop": 5}, "stop"),
        ({"messages": HELLO, "max_tokens": 0}, "max_tokens"),
        ({"messages": HELLO, "max_tokens": 10**6}, "max_tokens"),
        ({"messages": HELLO, "max_completion_tokens": 1.5}, "max_tokens"),
        ({"messages": HELLO, "n": 10000}, "n"),
        ({"messages": HELLO, "n": 0}, "n"),
        ({"messages": HELLO, "logprobs": 3}, "logprobs"),
        ({"messages": HELLO, "logprobs": True, "top_logprobs": 1000}, "top_logprobs"),
        ({"messages": HELLO, "top_logprobs": 2}, "top_logprobs"),
        ({"messages": HELLO, "logit_bias": {"5": 1000}}, "logit_bias"),
        ({"messages": HELLO, "logit_bias": {"five": 1}}, "logit_bias"),
        ({"messages": HELLO, "logit_bias": {"99999999": 1}}, "logit_bias"),
        ({"messages": HELLO, "logit_bias": [5]}, "logit_bias"),
        ({"messages": HELLO, "tools": [{"type": "function"}]}, "tools"),
        ({"messages": HELLO, "continue_final_message": True}, "continue_final_message"),
        ({"messages": HELLO, "add_generation_prompt": False}, "add_generation_prompt"),
        ({"messages": HELLO, "stream": "yes"}, "stream"),
        ({"messages": HELLO, "stream": True, "stream_options": "x"}, "stream_options"),
        ({"messages": HELLO, "stream": True, "stream_options": [True]}, "stream_options"),
        ({"messages": HELLO, "stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x " * 9000}]}, "messages"),
    ],
)
def test_invalid_chat_requests_are_400_naming_the_field(
    server: str, body: dict[str, Any], param: str
) -> None:
    content = json.dumps(body)  # ASCII with escapes: an unpaired surrogate goes as "\\ud800", as JSON allows
    assert_error(httpx.post(f"{server}{CHAT}", content=content), 400, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": [1, 10**9]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "hi", "echo": True}, "echo"),
        ({"prompt": "hi", "logprobs": 21}, "logprobs"),
        ({"prompt": "hi", "logprobs": True}, "logprobs"),
        ({"prompt": "hi", "n": 17}, "n"),
    ],
)
def test_invalid_completion_requests_are_400(server: str, body: dict[str, Any], param: str) -> None:
    assert_error(httpx.post(f"{server}/v1/completions", json=body), 400, param)


@pytest.mark.parametrize(
    "content", [b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000, b""]
)
def test_a_body_that_is_no_json_object_is_400(server: str, content: bytes) -> None:
    response = httpx.post(f"{server}{CHAT}", content=content, headers={"content-type": "application/json"})
    assert_error(response, 400)
    assert_still_serving(server)


def test_an_unknown_model_is_404_and_the_served_one_is_named(server: str) -> None:
    error = assert_error(
        httpx.post(f"{server}{CHAT}", json={"model": "gpt-4", "messages": HELLO}), 404, "model"
    )
    assert error["code"] == "model_not_found" and MODEL in error["message"]


def test_unknown_routes_and_methods_are_json_errors(server: str) -> None:
    assert_error(httpx.get(f"{server}/v1/embeddings"), 404)
    assert_error(httpx.get(f"{server}{CHAT}"), 405)


def test_a_body_over_the_limit_is_413_without_reading_it_all(serve: Callable[..., Any]) -> None:
    with serve(max_body_bytes=1000) as url:
        big = {"messages": [{"role": "user", "content": "x" * 2000}]}
        assert_error(httpx.post(f"{url}{CHAT}", json=big), 413)

        def chunked():  # no Content-Length: the limit must hold while reading
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(100):
                yield b"x" * 100
            yield b'"}]}'

        assert_error(httpx.post(f"{url}{CHAT}", content=chunked()), 413)
        assert_still_serving(url)


def test_an_api_key_guards_the_api_but_not_health_or_metrics(serve: Callable[..., Any]) -> None:
    with serve(api_key="sesame") as url:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sesame"},
                        {"Authorization": "Basic sesame"}, {"Authorization": "Bearersesame"}):  # fmt: skip
            response = httpx.post(f"{url}{CHAT}", json={"messages": HELLO, "max_tokens": 2}, headers=headers)
            assert_error(response, 401)
        assert_error(httpx.get(f"{url}/v1/models"), 401)
        good = {"Authorization": "Bearer sesame"}
        assert httpx.get(f"{url}/v1/models", headers=good).status_code == 200
        for scheme in ("bearer sesame", "BEARER sesame", "Bearer  sesame"):  # RFC 7235: any case, 1*SP
            assert httpx.get(f"{url}/v1/models", headers={"Authorization": scheme}).status_code == 200
        reply = httpx.post(f"{url}{CHAT}", json={"messages": HELLO, "max_tokens": 2}, headers=good)
        assert reply.status_code == 200
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/metrics").status_code == 200


def test_a_full_queue_is_503_and_clears(serve: Callable[..., Any], make_engine: Callable[..., Any]) -> None:
    engine = make_engine(max_num_seqs=1)
    with serve(engine=engine, max_waiting=1) as url, contextlib.ExitStack() as open_streams:
        long = {"messages": HELLO, "max_tokens": 4000, "ignore_eos": True, "stream": True}
        for _ in range(2):  # one running, one waiting: the engine is full
            response = open_streams.enter_context(httpx.stream("POST", f"{url}{CHAT}", json=long))
            assert response.status_code == 200
        refused = httpx.post(f"{url}{CHAT}", json={"messages": HELLO, "max_tokens": 2})
        assert_error(refused, 503)
        assert refused.headers["retry-after"] == "1"
        open_streams.close()  # both clients leave: their requests are cancelled
        wait_for(lambda: idle(url), "the server to go idle")
        assert_still_serving(url)


def test_prompts_too_big_to_fit_are_refused_before_tokenizing_and_health_answers_meanwhile(
    server: str,
) -> None:
    """Four ~4 MB prompts at once (a few seconds of tokenizing each, holding the GIL): each is refused
    with one clear error while /health keeps answering (generous bounds: without the byte bound the
    tokenizer holds the event loop for tens of seconds)."""
    text = "hello world, this is a long prompt. " * 110_000  # ~3.9 MB, under the 4 MiB body cap
    bodies = [
        (CHAT, {"messages": [{"role": "user", "content": text}]}),
        (CHAT, {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]}),
        ("/v1/completions", {"prompt": text}),
        ("/v1/completions", {"prompt": [text]}),
    ]
    replies: list[httpx.Response] = []

    def send(path: str, body: dict[str, Any]) -> None:
        replies.append(httpx.post(f"{server}{path}", json=body, timeout=60))

    threads = [threading.Thread(target=send, args=item) for item in bodies]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        started = time.monotonic()
        assert httpx.get(f"{server}/health", timeout=10).status_code == 200
        assert time.monotonic() - started < HEALTH_BOUND, "/health waited for the big prompts"
        time.sleep(0.05)
    for reply in replies:
        error = assert_error(reply, 400)
        assert error["code"] == "context_length_exceeded" and "bytes" in error["message"], error
    assert_still_serving(server)


def test_an_error_quoting_a_huge_value_stays_one_short_line(server: str) -> None:
    body = {"messages": [{"role": "x" * 1_000_000, "content": "hi"}], "stop": ["y" * 1_000_000]}
    error = assert_error(httpx.post(f"{server}{CHAT}", json=body), 400, "messages")
    assert len(error["message"]) <= 1000 and "\n" not in error["message"]
    body = {"messages": HELLO, "stop": ["y" * 1_000_000]}
    error = assert_error(httpx.post(f"{server}{CHAT}", json=body), 400, "stop")
    assert len(error["message"]) <= 1000


def test_token_ids_that_leave_no_room_in_the_context_get_openais_code(server: str, reference) -> None:
    """The engine's rule (Engine.check_prompt), answered before a response starts, as OpenAI answers it."""
    ids = [20] * reference.max_model_len  # no room for one generated token
    reply = httpx.post(f"{server}/v1/completions", json={"prompt": ids, "max_tokens": 1})
    assert assert_error(reply, 400, "prompt")["code"] == "context_length_exceeded"
    assert_still_serving(server)
