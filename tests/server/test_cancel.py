"""A client that leaves cancels its request: the engine aborts it and frees its blocks (seen in /metrics)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.server.helpers import idle, scrape
from tests.waiting import wait_for

ABORTED = 'vllm:request_success_total{finished_reason="abort"}'
# Long enough that only a cancel can end it while the test runs.
ENDLESS = {
    "messages": [{"role": "user", "content": "tell me everything"}],
    "max_tokens": 4000,
    "ignore_eos": True,
}


def test_closing_a_stream_mid_reply_aborts_the_request_and_frees_its_blocks(server: str) -> None:
    aborted = scrape(server)[ABORTED]
    stream = {**ENDLESS, "stream": True}
    with (
        httpx.Client() as client,
        client.stream("POST", f"{server}/v1/chat/completions", json=stream) as response,
    ):
        lines = response.iter_lines()
        for _ in range(10):  # the role chunk, then tokens: the request is decoding
            next(lines)
        assert scrape(server)["lfm_chat:kv_blocks_used"] > 0
    # Esc in a remote pane: the client has closed the connection
    wait_for(lambda: scrape(server)[ABORTED] == aborted + 1, "the abort")
    metrics = scrape(server)
    assert metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:kv_cache_usage_perc"] == 0
    assert metrics["lfm_chat:kv_blocks_used"] == 0
    generated = metrics["vllm:generation_tokens_total"]
    time.sleep(0.3)
    assert scrape(server)["vllm:generation_tokens_total"] == generated  # nothing decodes on for nobody


def test_hanging_up_on_a_non_streamed_request_aborts_it(server: str) -> None:
    aborted = scrape(server)[ABORTED]
    body = json.dumps(ENDLESS).encode()
    host, port = urlsplit(server).hostname, urlsplit(server).port
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection((host, port)) as sock:
        sock.sendall(head.encode() + body)
        wait_for(lambda: scrape(server)["vllm:num_requests_running"] == 1, "the request to run")
    wait_for(lambda: scrape(server)[ABORTED] == aborted + 1, "the abort")
    wait_for(lambda: idle(server), "the server to go idle")


def test_a_request_still_waiting_for_a_slot_is_cancelled_too(
    serve: Callable[..., Any], make_engine: Callable[..., Any]
) -> None:
    with serve(engine=make_engine(max_num_seqs=1)) as url:
        stream = {**ENDLESS, "stream": True}
        with httpx.Client() as first, first.stream("POST", f"{url}/v1/chat/completions", json=stream):
            with httpx.Client() as second, second.stream("POST", f"{url}/v1/chat/completions", json=stream):
                wait_for(lambda: scrape(url)["vllm:num_requests_waiting"] == 1, "the second request to wait")
            wait_for(lambda: scrape(url)["vllm:num_requests_waiting"] == 0, "the waiting request to go")
            assert scrape(url)["vllm:num_requests_running"] == 1
        wait_for(lambda: idle(url), "the server to go idle")
        assert scrape(url)[ABORTED] == 2
