"""Big request bodies are parsed off the event loop, one at a time: eight clients sending ~4 MB
bodies of a million small values (a second each to parse and check, then refused) while `/health`
and a small chat are served.

The server is a real `lfm-chat serve` process, so that the senders here do not share its interpreter.
The bound on `/health` is generous: with the bodies parsed on the loop, eight at once held it past
the bound on the build machine (a probe timed out); parsed on a thread, every probe is answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.test_connections import Served, serving
from tests.waiting import HANG_GUARD

ATTACKERS, ROUNDS = 8, 1
HEALTH_BOUND = 5.0  # seconds a /health probe may take during the attack
HELLO = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
BODIES = (  # each under the 4 MiB cap, each refused once parsed
    ("/v1/completions", json.dumps({"prompt": [1] * 1_300_000}).encode()),  # longer than the context
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "a"}] * 110_000}).encode()),
)


@pytest.fixture(scope="module")
def served(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tiny_ckpt, tmp_path_factory.mktemp("bodies-log") / "serve.log", []) as served:
        yield served


def test_big_bodies_from_eight_clients_leave_health_and_a_small_chat_served(served: Served) -> None:
    statuses: list[int] = []

    def attack(index: int) -> None:
        path, body = BODIES[index % len(BODIES)]
        headers = {"content-type": "application/json"}
        with httpx.Client(timeout=HANG_GUARD) as client:
            for _ in range(ROUNDS):
                statuses.append(client.post(f"{served.url}{path}", content=body, headers=headers).status_code)

    attackers = [threading.Thread(target=attack, args=(index,)) for index in range(ATTACKERS)]
    for thread in attackers:
        thread.start()
    chats: list[httpx.Response] = []
    with httpx.Client(timeout=HEALTH_BOUND) as probe:
        while any(thread.is_alive() for thread in attackers):
            assert probe.get(f"{served.url}/health").status_code == 200
            if not chats:
                chats.append(httpx.post(f"{served.url}/v1/chat/completions", json=HELLO, timeout=HANG_GUARD))
    for thread in attackers:
        thread.join()
    assert chats and chats[0].status_code == 200, chats
    assert sorted(set(statuses)) == [400] and len(statuses) == ATTACKERS * ROUNDS
