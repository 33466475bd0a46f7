"""The /metrics text, without HTTP: vLLM's names and Prometheus' text format, from a snapshot and events."""

from __future__ import annotations

import re

from engine import EngineSnapshot, RequestMetrics, TokenEvent
from server.metrics import Histogram, ServerMetrics, render

SNAPSHOT = EngineSnapshot(
    time=0.0,
    steps=10,
    running=3,
    waiting=2,
    max_num_seqs=8,
    step_tokens=40,
    step_decode_tokens=3,
    step_prefill_tokens=37,
    token_budget=256,
    step_time=0.02,
    kv_blocks_used=25,
    kv_blocks_cached=5,
    kv_blocks_total=100,
    prefix_hit_rate=0.25,
    cached_prompt_tokens=50,
    prompt_tokens=200,
    preemptions=1,
    tokens_per_s=12.5,
    throughput_history=(),
    requests=(),
)
LINE = re.compile(
    r'^(# (HELP|TYPE) \S+ .+|[a-z_:][a-z0-9_:]*\{model_name="m\\"x",engine="0"(,[a-z_]+="[^"]*")*\} \S+)$'
)


def event(tokens: int, generated: int, finished: bool = False) -> TokenEvent:
    metrics = RequestMetrics(
        arrival_time=1.0, prompt_tokens=10, first_token_time=1.5, generated_tokens=generated
    )
    metrics.first_scheduled_time = 1.1
    if finished:
        metrics.finished_time = 3.0
    return TokenEvent("r", None, "x", (7,) * tokens, finished, "stop" if finished else None, None, metrics)


def test_every_line_is_prometheus_text_with_vllms_labels() -> None:
    text = render(SNAPSHOT, ServerMetrics(), 'm"x')
    assert text.endswith("\n")
    for line in text.splitlines():
        assert LINE.match(line), line


def test_values_come_from_the_snapshot_and_the_events() -> None:
    served = ServerMetrics()
    served.observe(event(1, 1))  # the first token: TTFT 0.5 s
    served.observe(event(2, 3))
    served.observe(event(0, 3, finished=True))  # end-to-end 2 s
    text = render(SNAPSHOT, served, "m")
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    labels = '{model_name="m",engine="0"}'
    assert samples[f"vllm:num_requests_running{labels}"] == "3.0"
    assert samples[f"vllm:num_requests_waiting{labels}"] == "2.0"
    assert samples[f"vllm:kv_cache_usage_perc{labels}"] == "0.25"
    assert samples[f"vllm:prefix_cache_queries_total{labels}"] == "200.0"
    assert samples[f"vllm:prefix_cache_hits_total{labels}"] == "50.0"
    assert samples[f"vllm:num_preemptions_total{labels}"] == "1.0"
    assert samples[f"vllm:generation_tokens_total{labels}"] == "3.0"
    assert samples['vllm:request_success_total{model_name="m",engine="0",finished_reason="stop"}'] == "1.0"
    assert samples['vllm:request_success_total{model_name="m",engine="0",finished_reason="abort"}'] == "0.0"
    assert samples[f"vllm:time_to_first_token_seconds_count{labels}"] == "1.0"
    assert samples['vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.5"}'] == "1.0"
    assert samples['vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.25"}'] == "0.0"
    assert samples[f"vllm:e2e_request_latency_seconds_sum{labels}"] == "2.0"
    assert "# TYPE vllm:prompt_tokens_total counter" in text


def test_histogram_buckets_are_cumulative_and_end_in_inf() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 5.0):
        histogram.observe(value)
    assert histogram.samples("h", 'a="b"') == [
        'h_bucket{a="b",le="1.0"} 2.0',
        'h_bucket{a="b",le="2.0"} 3.0',
        'h_bucket{a="b",le="+Inf"} 4.0',
        'h_sum{a="b"} 8.0',
        'h_count{a="b"} 4.0',
    ]
