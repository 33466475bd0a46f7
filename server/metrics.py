"""GET /metrics: Prometheus text with vLLM's metric names, so vLLM dashboards and `lfm-chat --server` read us.

Engine-wide state comes from the worker's latest EngineSnapshot (published after every step);
what the snapshot does not count (generated tokens, finished requests, latencies) is counted
here from the token events as they reach the event loop. Counters are written as
prometheus_client writes them: `# TYPE vllm:prompt_tokens_total counter`, then the sample.
Every sample carries vLLM's labels, `model_name` and `engine`.

Beside vLLM's names, a few `lfm_chat:` gauges carry what our dashboard shows and vLLM does not
expose (batch slots, token budget, KV blocks).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence

from engine import EngineSnapshot, TokenEvent

# vLLM's buckets (vllm/v1/metrics/loggers.py), so a dashboard's quantiles mean the same thing.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
TTFT_BUCKETS += (20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS: tuple[float, ...] = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
)
E2E_BUCKETS += (240.0, 480.0, 960.0, 1920.0, 7680.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Histogram:
    """A Prometheus histogram: counts per bucket, their sum and their number."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def samples(self, name: str, labels: str) -> list[str]:
        lines, total = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += count
            lines.append(f'{name}_bucket{{{labels},le="{_number(bound)}"}} {_number(total)}')
        lines += [f"{name}_sum{{{labels}}} {_number(self.sum)}", f"{name}_count{{{labels}}} {_number(total)}"]
        return lines


class ServerMetrics:
    """What the server counts from token events; observe() runs on the event loop, once per event."""

    def __init__(self) -> None:
        self.generation_tokens = 0
        self.finished: Counter[str] = Counter()  # finish reason -> requests
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def observe(self, event: TokenEvent) -> None:
        metrics = event.metrics
        self.generation_tokens += len(event.token_ids)
        first_tokens = event.token_ids and metrics.generated_tokens == len(event.token_ids)
        if first_tokens and metrics.ttft is not None:
            self.ttft.observe(metrics.ttft)
        if event.finished:
            self.finished[event.finish_reason or "error"] += 1
            if metrics.finished_time is not None:
                self.e2e.observe(metrics.finished_time - metrics.arrival_time)


def render(snapshot: EngineSnapshot, served: ServerMetrics, model_name: str, queued: int = 0) -> str:
    """The whole /metrics page; `queued` requests wait in the server's own queues (server/bridge.py)."""
    labels = f'model_name="{_escape(model_name)}",engine="0"'
    out: list[str] = []

    def metric(name: str, kind: str, doc: str, value: float) -> None:
        out.extend((f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {_number(value)}"))

    total = snapshot.kv_blocks_total
    metric("vllm:num_requests_running", "gauge", "Requests in the running batch.", snapshot.running)
    waiting = snapshot.waiting + queued
    metric("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", waiting)
    usage = snapshot.kv_blocks_used / total if total else 0.0
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage)
    queries, hits = snapshot.prompt_tokens, snapshot.cached_prompt_tokens
    metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in prompt tokens.", queries)
    metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in prompt tokens.", hits)
    metric("vllm:num_preemptions_total", "counter", "Requests preempted.", snapshot.preemptions)
    metric("vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", queries)
    metric("vllm:generation_tokens_total", "counter", "Tokens generated.", served.generation_tokens)
    spec = snapshot
    drafts, drafted, accepted = spec.spec_drafts, spec.spec_draft_tokens, spec.spec_accepted_tokens
    metric("vllm:spec_decode_num_drafts_total", "counter", "Speculative drafts verified.", drafts)
    metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens verified.", drafted)
    metric("vllm:spec_decode_num_accepted_tokens_total", "counter", "Drafted tokens accepted.", accepted)
    name = "vllm:request_success_total"
    out += [f"# HELP {name} Finished requests, by finish reason.", f"# TYPE {name} counter"]
    for reason in sorted({"stop", "length", "abort", *served.finished}):
        out.append(
            f'{name}{{{labels},finished_reason="{_escape(reason)}"}} {_number(served.finished[reason])}'
        )
    for name, doc, histogram in (
        ("vllm:time_to_first_token_seconds", "Time to first token in seconds.", served.ttft),
        ("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.", served.e2e),
    ):
        out += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *histogram.samples(name, labels)]
    metric("lfm_chat:max_num_seqs", "gauge", "Requests a step can batch.", snapshot.max_num_seqs)
    metric("lfm_chat:token_budget", "gauge", "Tokens a step may carry.", snapshot.token_budget)
    metric("lfm_chat:step_tokens", "gauge", "Tokens in the last step.", snapshot.step_tokens)
    metric("lfm_chat:kv_blocks_total", "gauge", "KV blocks in the pool.", total)
    metric("lfm_chat:kv_blocks_used", "gauge", "KV blocks held by requests.", snapshot.kv_blocks_used)
    metric(
        "lfm_chat:kv_blocks_cached",
        "gauge",
        "KV blocks held only by the prefix cache.",
        snapshot.kv_blocks_cached,
    )
    rate = snapshot.tokens_per_s
    metric("lfm_chat:generation_tokens_per_second", "gauge", "Tokens/s over the last few seconds.", rate)
    return "\n".join(out) + "\n"


def _number(value: float) -> str:
    """Prometheus' spelling: 3.0, +Inf."""
    return "+Inf" if value == float("inf") else repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
