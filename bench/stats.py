"""Small statistics over traces: percentiles, medians, rates. None stands for "not measurable here"."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from bench.scenario import RequestTrace


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Iterable[float | None]) -> float | None:
    """Median of the measured values; runs that could not measure a figure are skipped."""
    return percentile([v for v in values if v is not None], 50)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def output_rate(traces: Sequence[RequestTrace]) -> float:
    """Generated tokens per second of wall time, from the first arrival to the last token."""
    tokens = sum(len(t.token_times) for t in traces)
    span = max(t.token_times[-1] for t in traces) - min(t.arrival for t in traces)
    return tokens / span


def decode_rate(traces: Sequence[RequestTrace]) -> float:
    """Tokens after each request's first, per second from the first first-token to the last token.

    Prefill of later requests falls inside the span, as it does for a user watching the streams.
    """
    tokens = sum(len(t.token_times) - 1 for t in traces)
    span = max(t.token_times[-1] for t in traces) - min(t.token_times[0] for t in traces)
    return tokens / span


def batch_decode_rate(traces: Sequence[RequestTrace]) -> float:
    """Tokens per second once every request has its first token: the batch decoding alone, as
    llama.cpp's llama-batched-bench reports it (S_TG, prefill excluded)."""
    start = max(t.token_times[0] for t in traces)
    tokens = sum(1 for t in traces for time in t.token_times if time > start)
    return tokens / (max(t.token_times[-1] for t in traces) - start)


def all_itls(traces: Iterable[RequestTrace]) -> list[float]:
    return [itl for trace in traces for itl in trace.itls]


def itls_between(traces: Iterable[RequestTrace], begin: float, end: float) -> list[float]:
    """Inter-token gaps of tokens that appeared in (begin, end]: latency felt during that window."""
    gaps: list[float] = []
    for trace in traces:
        times = trace.token_times
        gaps.extend(b - a for a, b in itertools.pairwise(times) if begin < b <= end)
    return gaps
