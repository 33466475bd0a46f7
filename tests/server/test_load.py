"""32 streaming clients at once, a quarter of them hanging up mid-reply: the rest complete, nothing leaks.

The clients keep sending for LFM_CHAT_LOAD_SECONDS (default 8, to stay quick in the suite; the
issue's acceptance run is a minute). The figures are printed (run with -s):

    LFM_CHAT_LOAD_SECONDS=60 .venv/bin/python -m pytest -s tests/server/test_load.py
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.server.helpers import idle, scrape
from tests.waiting import wait_for

CLIENTS = 32
LEAVE_CHANCE = 0.25
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "owls", "sing", "rivers"]


@dataclass
class Tally:
    sent: int = 0
    completed: int = 0
    left: int = 0  # clients that hung up before the final chunk
    tokens: int = 0
    ttfts: list[float] = field(default_factory=list)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (seconds in, RSS)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def one_request(http: httpx.AsyncClient, url: str, rng: random.Random, tally: Tally) -> None:
    """A streamed chat request; with LEAVE_CHANCE the client leaves after a few chunks."""
    text = " ".join(rng.choices(WORDS, k=rng.randint(3, 60)))
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": rng.randint(4, 48),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    leave_after = rng.randint(1, 8) if rng.random() < LEAVE_CHANCE else None
    start, chunks, finish, usage, done = time.monotonic(), 0, None, None, False
    tally.sent += 1
    async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line:
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line.removeprefix("data: "))
            if chunk["choices"]:
                chunks += 1
                finish = chunk["choices"][0]["finish_reason"] or finish
                if chunks == 2:
                    tally.ttfts.append(time.monotonic() - start)
            usage = chunk.get("usage") or usage
            if leave_after is not None and chunks >= leave_after and finish is None:
                break
    if finish is None:
        tally.left += 1
        return
    assert done and finish in ("stop", "length") and usage is not None, (done, finish, usage)
    tally.completed += 1
    tally.tokens += usage["completion_tokens"]


async def run_clients(url: str, seconds: float, tally: Tally) -> None:
    start = time.monotonic()
    deadline = start + seconds

    async def client(index: int) -> None:
        rng = random.Random(index)
        async with httpx.AsyncClient(timeout=120) as http:
            while time.monotonic() < deadline:
                await one_request(http, url, rng, tally)

    async def sample_memory() -> None:
        while time.monotonic() < deadline:
            tally.rss_mb.append((time.monotonic() - start, rss_mb()))
            await asyncio.sleep(1.0)

    await asyncio.gather(sample_memory(), *(client(i) for i in range(CLIENTS)))


@pytest.mark.slow
def test_32_streaming_clients_with_random_disconnects(serve: Callable[..., Any]) -> None:
    seconds = float(os.environ.get("LFM_CHAT_LOAD_SECONDS", "8"))
    tally = Tally()
    with serve(max_tokens=64) as url:
        before = scrape(url)
        started = time.monotonic()
        asyncio.run(run_clients(url, seconds, tally))
        elapsed = time.monotonic() - started
        wait_for(lambda: idle(url), "the server to go idle")
        after = scrape(url)
    finished = sum(after[k] - before[k] for k in after if k.startswith("vllm:request_success_total"))
    aborted = after['vllm:request_success_total{finished_reason="abort"}']
    assert finished == tally.sent  # every request ended exactly once, on the server too
    assert 0 < aborted <= tally.left  # a client may leave just as its request finishes
    assert tally.completed + tally.left == tally.sent and tally.completed > tally.left
    assert after["lfm_chat:kv_blocks_used"] == after["vllm:num_requests_running"] == 0
    warm = [mb for t, mb in tally.rss_mb if t >= seconds / 4]
    growth = warm[-1] - warm[0]
    ttft = statistics.quantiles(tally.ttfts, n=10)
    peak = max(mb for _, mb in tally.rss_mb)
    print(
        f"\n{CLIENTS} clients for {elapsed:.1f} s: {tally.sent} requests ({tally.completed} completed, "
        f"{tally.left} left mid-reply, {aborted:.0f} aborted by the server), {tally.tokens} tokens "
        f"completed ({tally.tokens / elapsed:.0f} tok/s), TTFT median {ttft[4]:.3f} s, p90 {ttft[-1]:.3f} s; "
        f"RSS {warm[0]:.0f} -> {warm[-1]:.0f} MB after warm-up (max {peak:.0f}), "
        f"preemptions {after['vllm:num_preemptions_total']:.0f}"
    )
    assert growth < 64, f"RSS grew {growth:.0f} MB under a steady load"
