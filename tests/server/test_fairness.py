"""Per-client fairness: one client's flood of long requests takes its share of the queue, not all of
it, and a second client's request gets the next free slot of the engine, ahead of the flood.

Two clients on one machine: the flood comes from 127.0.0.1, the second client from 127.0.0.2 (every
127/8 address is this host's loopback), through the `openai` SDK with its retries off, so a 503 or
429 is a failure, not a wait.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from server.bridge import client_of
from server.limits import per_client_share
from tests.server.conftest import MODEL
from tests.server.helpers import idle, scrape
from tests.waiting import HANG_GUARD, wait_for

CHAT = "/v1/chat/completions"
SLOTS, WAITING = 2, 8
LONG = {
    "messages": [{"role": "user", "content": "go on"}],
    "max_tokens": 4000,
    "ignore_eos": True,
    "stream": True,
}


def second_client(url: str) -> openai.OpenAI:
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    http = httpx.Client(transport=transport, timeout=HANG_GUARD)
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, http_client=http)


def test_a_flood_takes_its_share_and_a_second_client_runs_at_the_next_free_slot(
    serve: Callable[..., Any], make_engine: Callable[..., Any]
) -> None:
    share = per_client_share(SLOTS, WAITING)  # 2 running + 4 waiting
    with (
        serve(engine=make_engine(max_num_seqs=SLOTS), max_waiting=WAITING) as url,
        contextlib.ExitStack() as flood,
    ):
        streams = []
        for _ in range(share):
            stream = flood.enter_context(httpx.stream("POST", f"{url}{CHAT}", json=LONG, timeout=HANG_GUARD))
            assert stream.status_code == 200
            streams.append(stream)
        over = httpx.post(f"{url}{CHAT}", json=LONG)
        assert over.status_code == 429, over.text
        assert over.headers["retry-after"] == "1"
        assert over.json()["error"]["code"] == "rate_limit_exceeded"
        assert scrape(url)["vllm:num_requests_waiting"] == share - SLOTS

        replies: list[Any] = []

        def ask() -> None:
            with second_client(url) as client:
                replies.append(
                    client.chat.completions.create(
                        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                    )
                )

        asker = threading.Thread(target=ask)
        asker.start()
        wait_for(
            lambda: scrape(url)["vllm:num_requests_waiting"] == share - SLOTS + 1,
            "the second client to queue",
        )
        streams[0].close()  # a running flood request ends: its slot is the second client's, not the flood's
        asker.join(HANG_GUARD)
        assert len(replies) == 1, "the second client got no reply while the flood's requests ran"
        assert replies[0].choices[0].message.role == "assistant"
        assert scrape(url)["vllm:num_requests_waiting"] >= share - SLOTS - 1  # the flood still waits
        flood.close()
        wait_for(lambda: idle(url), "the server to go idle once the flood hangs up")


@pytest.mark.parametrize(
    ("peer", "client"),
    [
        (("203.0.113.7", 5000), "203.0.113.7"),
        (("2001:db8:1:2:aaaa::1", 5000), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 6000), "2001:db8:1:2::/64"),  # one host's /64 is one client
        (("::ffff:198.51.100.4", 5000), "198.51.100.4"),
        (None, "local"),
    ],
)
def test_a_client_is_its_address_and_an_ipv6_host_its_64(peer: tuple[str, int] | None, client: str) -> None:
    assert client_of(peer) == client
