"""Prometheus text exposition, read just far enough for the dashboard: samples summed by name.

Labels are dropped and same-named samples added up (vLLM labels each series with the model
name; a server with several engines reports one series each). Histogram/summary parts keep
their suffixed names (`_bucket`, `_sum`, `_count`) and are simply not asked for.
"""

from __future__ import annotations

import math


def parse(text: str) -> dict[str, float]:
    """{metric name: value summed over its label sets}; comments, blanks and bad lines skipped."""
    samples: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, brace, rest = line.partition("{")
        if brace:
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])  # a timestamp may follow; float() reads NaN and +Inf too
        except ValueError:
            continue
        if not math.isnan(value):
            samples[name.strip()] = samples.get(name.strip(), 0.0) + value
    return samples
