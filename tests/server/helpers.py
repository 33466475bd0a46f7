"""What the server tests share besides fixtures: reading /metrics as a client would."""

from __future__ import annotations

import re

import httpx

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_COMMON_LABELS = re.compile(r'model_name="[^"]*",engine="0",?')


def scrape(url: str) -> dict[str, float]:
    """GET /metrics as {name: value}, with labels other than model_name and engine in the key:
    {"vllm:num_requests_running": 0.0, 'vllm:request_success_total{finished_reason="abort"}': 2.0, ...}."""
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, f"not a Prometheus sample: {line!r}"
            name, labels, value = match.groups()
            rest = _COMMON_LABELS.sub("", labels or "")
            samples[f"{name}{{{rest}}}" if rest else name] = float(value)
    return samples


def idle(url: str) -> bool:
    """Nothing running or waiting and no KV block held by a request (the prefix cache may keep some)."""
    metrics = scrape(url)
    busy = ("vllm:num_requests_running", "vllm:num_requests_waiting", "lfm_chat:kv_blocks_used")
    return all(metrics[name] == 0 for name in busy)
