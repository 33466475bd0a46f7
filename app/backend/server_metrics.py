"""What a server says about its load, polled a few times a second, as one ServerSnapshot.

vLLM's Prometheus names (lfm-chat serve exposes the same ones); llama-server's `llamacpp:`
names and its /slots; and for a server with neither, only what this client sees itself.

The server's figures are untrusted: a figure that cannot be true (a negative or 300-digit count,
750% of the KV cache, +Inf) is unknown ("?"), never shown or computed with. One bad answer never
stops the polling; a server that has nothing to say is asked less and less often.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import httpx

from app.backend import prometheus
from app.backend.unpack import IDENTITY, BodyRefused, BodyTooLarge, aunpacked

HISTORY = 120  # throughput points kept, one per poll
ENDPOINTS = ("/metrics", "/slots")
BODY_LIMIT = 1 << 20  # bytes of a /metrics or /slots answer read; vLLM's is ~50 KiB
POLL_DEADLINE = 5.0  # seconds for one poll, body included (a slow drip is given up on)
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0  # seconds before asking again after a poll with no figures
MAX_COUNT = 10**9  # requests running, queued, preempted: more is no real server's figure
MAX_TOKENS = 2**53  # a token or cache-query counter: past this a float no longer counts by ones
MAX_TOKENS_PER_S = 10**6

NO_METRICS = "the server exports no metrics"
TOO_LARGE = f"the server's /metrics is larger than {BODY_LIMIT >> 20} MiB: ignored"
TOO_SLOW = f"metrics unavailable: the server took over {POLL_DEADLINE:.0f} s to send them"


# What each source never reports, said on the dashboard in place of a "?" that looks like a fault.
NOT_REPORTED: dict[str, tuple[str, ...]] = {
    "llama-server metrics": ("prefix hits", "preemptions"),
    "llama-server /slots": ("queue", "KV cache", "prefix hits", "preemptions"),
}


@dataclass(frozen=True, slots=True)
class ClientStream:
    """One of this client's open streams as this client sees it (a server does not say whose
    requests are whose): before its first token it is queued or prefilling, as far as we know."""

    tag: object
    started: bool  # its first token has come
    tokens: int  # generated so far: the server's usage count, else the chunks received
    max_tokens: int | None
    tokens_per_s: float


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """None for a figure the server does not expose. `source` says where the figures came from."""

    source: str  # "vLLM metrics" | "llama-server metrics" | "llama-server /slots" | "" (none)
    answering: bool = True  # False: the last poll got no answer at all (the server is down or away)
    note: str = ""  # with no source: why there are no figures, in one sentence
    skipped_lines: int = 0  # lines of /metrics that broke the format's rules
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None  # 0..1 of the server's KV cache
    prefix_hit_rate: float | None = None
    preemptions: int | None = None
    tokens_per_s: float = 0.0  # the server's generation rate if it counts tokens, else this client's
    throughput_history: tuple[float, ...] = ()
    streams: tuple[ClientStream, ...] = ()  # this client's open streams
    requests: tuple[()] = ()  # no per-request rows: the chat screen reads none from a server

    @property
    def streams_open(self) -> int:
        return len(self.streams)

    @property
    def waiting_here(self) -> int:
        """This client's streams with no token yet: queued (or prefilling) as far as it knows."""
        return sum(not stream.started for stream in self.streams)


class TooLarge(Exception):
    """The answer is longer than BODY_LIMIT: not read further."""


def count(value: float | None, limit: int = MAX_COUNT) -> int | None:
    """A whole count in [0, limit], or None for what no count can be (negative, huge, NaN, Inf)."""
    if value is None or not 0 <= value <= limit:
        return None
    return round(value)


def fraction(value: float | None) -> float | None:
    """A share in [0, 1], or None: 7.5 of a cache is not a reading to show."""
    return value if value is not None and 0 <= value <= 1 else None


def hit_rate(hits: int | None, queries: int | None) -> float | None:
    return fraction(hits / queries) if queries and hits is not None else None


def first(samples: Mapping[str, float | None], *names: str) -> float | None:
    """The value of the first of `names` the server exports (vLLM renamed some between versions)."""
    return next((samples[name] for name in names if name in samples), None)


def from_samples(samples: Mapping[str, float | None]) -> ServerSnapshot | None:
    """vLLM's or llama-server's figures from /metrics, or None if it has neither's names."""
    if "vllm:num_requests_running" in samples:
        queries = first(samples, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
        hits = first(samples, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
        return ServerSnapshot(
            "vLLM metrics",
            running=count(samples["vllm:num_requests_running"]),
            waiting=count(samples.get("vllm:num_requests_waiting", 0.0)),
            kv_usage=fraction(first(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
            prefix_hit_rate=hit_rate(count(hits, MAX_TOKENS), count(queries, MAX_TOKENS)),
            preemptions=count(first(samples, "vllm:num_preemptions_total", "vllm:num_preemptions")),
        )
    if "llamacpp:requests_processing" in samples:
        return ServerSnapshot(
            "llama-server metrics",
            running=count(samples["llamacpp:requests_processing"]),
            waiting=count(samples.get("llamacpp:requests_deferred", 0.0)),
            kv_usage=fraction(samples.get("llamacpp:kv_cache_usage_ratio")),
        )
    return None


def generated_total(samples: Mapping[str, float | None]) -> int | None:
    """The server's count of generated tokens, whose rate of change is its throughput."""
    names = ("vllm:generation_tokens_total", "vllm:generation_tokens", "llamacpp:tokens_predicted_total")
    return count(first(samples, *names), MAX_TOKENS)


def from_slots(slots: object) -> ServerSnapshot | None:
    """llama-server's GET /slots: a list of slots, each busy or not (no queue figure)."""
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        return None
    busy = sum(1 for s in slots if s.get("is_processing") or s.get("state", 0) != 0)
    return ServerSnapshot("llama-server /slots", running=count(busy))


async def read_limited(response: httpx.Response, limit: int = BODY_LIMIT) -> bytes:
    """The body, read and unpacked as it comes; TooLarge as soon as it passes `limit` unpacked (the
    rest stays unread: a compressed body could unpack to any size from one small chunk)."""
    body = bytearray()
    try:
        async for piece in aunpacked(response, limit, "the server's metrics"):
            body += piece
    except BodyTooLarge:
        raise TooLarge from None
    return bytes(body)


def unavailable(error: Exception) -> str:
    """One sentence for the dashboard; the server's own words stay out of it."""
    if isinstance(error, TooLarge):
        return TOO_LARGE
    if isinstance(error, TimeoutError):
        return TOO_SLOW
    if isinstance(error, BodyRefused):
        return f"metrics unavailable: {error}"
    return f"metrics unavailable: their answer could not be read ({type(error).__name__})"


class MetricsPoller:
    """Finds which endpoint a server has, then turns each poll into a ServerSnapshot. Never raises."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.endpoints = ENDPOINTS  # what to try; once one has answered with figures, only that one
        self._last_total: tuple[float, int] | None = None  # (time, generated tokens)
        self.counts_tokens = False  # the server counts generated tokens: its rate is the throughput
        self.failures = 0  # polls in a row without figures: each doubles the wait before the next
        self.errors = 0  # polls that failed on an answer that could not be read
        self._held: ServerSnapshot | None = None  # shown instead of asking again until `_resume_at`
        self._resume_at = 0.0

    async def poll(self) -> ServerSnapshot:
        """The server's figures; or why there are none (`note`); or `answering=False` when it does not
        answer at all (tokens/s etc. filled in by the caller)."""
        if self._held is not None and time.monotonic() < self._resume_at:
            return self._held
        try:
            snap = await asyncio.wait_for(self._ask(), POLL_DEADLINE)
        except httpx.TransportError:
            return ServerSnapshot("", answering=False)  # the chat streams say what it cost them
        except Exception as error:  # one bad answer must never stop the polling
            self.errors += 1
            snap = ServerSnapshot("", note=unavailable(error))
        if snap.source:
            self.failures, self._held = 0, None
        else:
            self._back_off(snap)
        return snap

    def _back_off(self, snap: ServerSnapshot) -> None:
        self.counts_tokens = False
        self._held = snap
        self._resume_at = time.monotonic() + min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(self.failures, 16))
        self.failures += 1

    async def _ask(self) -> ServerSnapshot:
        for path in self.endpoints:
            snap = await self._fetch(path)
            if snap is not None:
                self.endpoints = (path,)
                return snap
        return ServerSnapshot("", note=NO_METRICS)

    async def _fetch(self, path: str) -> ServerSnapshot | None:
        async with self.client.stream("GET", path, headers=IDENTITY, timeout=2.0) as response:
            if response.status_code != 200:
                return None
            body = await read_limited(response)
        return self._read_slots(body) if path == "/slots" else self._read_metrics(body)

    @staticmethod
    def _read_slots(body: bytes) -> ServerSnapshot | None:
        try:
            return from_slots(json.loads(body))
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
            return None

    def _read_metrics(self, body: bytes) -> ServerSnapshot | None:
        exposition = prometheus.parse(body)
        samples = exposition.totals()
        snap = from_samples(samples)
        total = generated_total(samples) if snap is not None else None
        self.counts_tokens = total is not None
        rate = self._rate(total)
        return None if snap is None else replace(snap, skipped_lines=exposition.skipped, tokens_per_s=rate)

    def _rate(self, total: int | None) -> float:
        """Tokens per second since the last poll; 0 when unknown (no count, a counter reset, a wild jump)."""
        now, last = time.monotonic(), self._last_total
        self._last_total = None if total is None else (now, total)
        if total is None or last is None or now <= last[0]:
            return 0.0
        rate = (total - last[1]) / (now - last[0])
        return rate if 0 <= rate <= MAX_TOKENS_PER_S else 0.0
