"""The Prometheus text the dashboard reads: vLLM's and llama-server's, in their real format."""

from __future__ import annotations

from app.backend import prometheus
from app.backend.server_metrics import from_samples, from_slots, generated_total
from tests.app.fake_openai import VLLM_METRICS

LLAMA_SERVER = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_labels_are_summed_and_comments_skipped() -> None:
    text = 'a{x="1"} 1.5\na{x="2",y="}"} 2 1712345678\n# b 3\nbad line\nc NaN\nd +Inf\n'
    assert prometheus.parse(text) == {"a": 3.5, "d": float("inf")}


def test_vllm_names_become_the_dashboard_figures() -> None:
    samples = prometheus.parse(VLLM_METRICS % {"running": 2, "generated": 40})
    snap = from_samples(samples)
    assert snap is not None and snap.source == "vLLM metrics"
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate, snap.preemptions) == (
        2,
        0,
        0.25,
        0.25,
        3,
    )
    assert generated_total(samples) == 40


def test_llama_server_metrics_and_slots() -> None:
    samples = prometheus.parse(LLAMA_SERVER)
    snap = from_samples(samples)
    assert snap is not None and (snap.running, snap.waiting, snap.kv_usage) == (2, 1, None)
    assert generated_total(samples) == 3469
    slots = from_slots([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}])
    assert slots is not None and slots.running == 1 and slots.source == "llama-server /slots"
    assert from_samples({"other_metric": 1.0}) is None and from_slots({"not": "a list"}) is None
