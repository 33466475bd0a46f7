"""Metrics arithmetic with explicit clocks (no sleeping, no wall-clock assertions)."""

from __future__ import annotations

import dataclasses

import pytest

from engine.core.metrics import BUCKET_SECONDS, HISTORY_BUCKETS, RequestMetrics, ThroughputMeter


def test_request_latencies_come_from_its_own_timestamps():
    m = RequestMetrics(arrival_time=10.0, prompt_tokens=5)
    assert m.ttft is None and m.queue_time is None and m.tokens_per_s == 0.0
    m.first_scheduled_time = 10.5
    for now in (11.0, 11.25, 11.75, 12.0):
        m.on_token(now)
    assert m.queue_time == 0.5 and m.ttft == 1.0
    assert m.mean_itl == pytest.approx(1 / 3)  # gaps 0.25, 0.5, 0.25
    assert m.tokens_per_s == pytest.approx(3.0) and m.generated_tokens == 4


def test_copy_is_detached_from_later_tokens():
    m = RequestMetrics(arrival_time=0.0, prompt_tokens=1)
    m.on_token(1.0)
    m.on_token(2.0)
    snapshot = m.copy()
    m.on_token(3.0)
    assert snapshot.last_token_time == 2.0 and snapshot.generated_tokens == 2


def test_metrics_stay_a_few_numbers_however_long_the_reply():
    """Every stream event carries a copy: a per-token list here made long replies cost O(n^2) memory."""
    m = RequestMetrics(arrival_time=0.0, prompt_tokens=1)
    for i in range(10_000):
        m.on_token(1.0 + i / 100)
    values = [getattr(m, f.name) for f in dataclasses.fields(m)]
    assert all(value is None or isinstance(value, int | float) for value in values)
    assert m.mean_itl == pytest.approx(0.01) and m.tokens_per_s == pytest.approx(100.0)


def test_throughput_history_has_a_bucket_per_half_second_including_idle_ones():
    meter = ThroughputMeter(now=0.0)
    meter.add(10, now=0.1)
    meter.add(5, now=0.6)
    assert meter.history(now=1.6) == (10 / BUCKET_SECONDS, 5 / BUCKET_SECONDS, 0.0)
    assert meter.rate(now=1.6) == pytest.approx(15 / 1.6)


def test_throughput_history_is_bounded_and_decays_to_zero_when_idle():
    meter = ThroughputMeter(now=0.0)
    meter.add(100, now=0.0)
    history = meter.history(now=1000.0)
    assert len(history) == HISTORY_BUCKETS and set(history) == {0.0}
    assert meter.rate(now=1000.0) == 0.0
