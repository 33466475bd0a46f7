"""What a server says about its load, polled a few times a second, as one ServerSnapshot.

vLLM's Prometheus names (lfm-chat serve exposes the same ones); llama-server's `llamacpp:`
names and its /slots; and for a server with neither, only what this client sees itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import httpx

from app.backend import prometheus

HISTORY = 120  # throughput points kept, one per poll


@dataclass(frozen=True, slots=True)
class ServerSnapshot:
    """None for a figure the server does not expose. `source` says where the figures came from."""

    source: str  # "vLLM metrics" | "llama-server metrics" | "llama-server /slots" | "" (none)
    answering: bool = True  # False: the last poll got no answer at all (the server is down or away)
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None  # 0..1 of the server's KV cache
    prefix_hit_rate: float | None = None
    preemptions: int | None = None
    tokens_per_s: float = 0.0  # the server's generation rate if it counts tokens, else this client's
    throughput_history: tuple[float, ...] = ()
    streams_open: int = 0  # this client's
    pane_rates: dict[object, float] = field(default_factory=dict)  # tag -> this client's tok/s
    requests: tuple[()] = ()  # no per-request rows: the chat screen reads none from a server


def from_samples(samples: dict[str, float]) -> ServerSnapshot | None:
    """vLLM's or llama-server's figures from /metrics, or None if it has neither's names."""
    if "vllm:num_requests_running" in samples:
        queries = samples.get("vllm:prefix_cache_queries_total", samples.get("vllm:prefix_cache_queries"))
        hits = samples.get("vllm:prefix_cache_hits_total", samples.get("vllm:prefix_cache_hits"))
        kv = samples.get("vllm:kv_cache_usage_perc", samples.get("vllm:gpu_cache_usage_perc"))
        preempted = samples.get("vllm:num_preemptions_total", samples.get("vllm:num_preemptions"))
        return ServerSnapshot(
            "vLLM metrics",
            running=int(samples["vllm:num_requests_running"]),
            waiting=int(samples.get("vllm:num_requests_waiting", 0)),
            kv_usage=kv,
            prefix_hit_rate=hits / queries if queries and hits is not None else None,
            preemptions=None if preempted is None else int(preempted),
        )
    if "llamacpp:requests_processing" in samples:
        return ServerSnapshot(
            "llama-server metrics",
            running=int(samples["llamacpp:requests_processing"]),
            waiting=int(samples.get("llamacpp:requests_deferred", 0)),
            kv_usage=samples.get("llamacpp:kv_cache_usage_ratio"),
        )
    return None


def generated_total(samples: dict[str, float]) -> float | None:
    """The server's count of generated tokens, whose rate of change is its throughput."""
    for name in ("vllm:generation_tokens_total", "vllm:generation_tokens", "llamacpp:tokens_predicted_total"):
        if name in samples:
            return samples[name]
    return None


def from_slots(slots: object) -> ServerSnapshot | None:
    """llama-server's GET /slots: a list of slots, each busy or not (no queue figure)."""
    if not isinstance(slots, list) or not all(isinstance(s, dict) for s in slots):
        return None
    busy = sum(1 for s in slots if s.get("is_processing") or s.get("state", 0) != 0)
    return ServerSnapshot("llama-server /slots", running=busy)


class MetricsPoller:
    """Finds which endpoint a server has (once), then turns each poll into a ServerSnapshot."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.endpoints = ["/metrics", "/slots"]  # what is left to try; the one that works stays
        self._last_total: tuple[float, float] | None = None  # (time, generated tokens)
        self.counts_tokens = False  # the server counts generated tokens: its rate is the throughput

    async def poll(self) -> ServerSnapshot | None:
        """The server's figures, None when it exposes none, or `answering=False` when it does not answer
        (tokens/s etc. filled in by the caller)."""
        for path in list(self.endpoints):
            try:
                response = await self.client.get(path, timeout=2.0)
            except httpx.HTTPError:
                return ServerSnapshot("", answering=False)  # the chat streams say what it cost them
            snap = self._read(path, response) if response.status_code == 200 else None
            if snap is not None:
                self.endpoints = [path]
                return snap
            if len(self.endpoints) > 1:  # still probing: this one is not it
                self.endpoints.remove(path)
        return None

    def _read(self, path: str, response: httpx.Response) -> ServerSnapshot | None:
        if path == "/slots":
            try:
                return from_slots(response.json())
            except ValueError:
                return None
        samples = prometheus.parse(response.text)
        snap = from_samples(samples)
        total = generated_total(samples)
        self.counts_tokens = snap is not None and total is not None
        if snap is None or total is None:
            return snap
        now, rate = time.monotonic(), 0.0
        if self._last_total is not None and now > self._last_total[0]:
            rate = max(0.0, (total - self._last_total[1]) / (now - self._last_total[0]))
        self._last_total = (now, total)
        return replace(snap, tokens_per_s=rate)
