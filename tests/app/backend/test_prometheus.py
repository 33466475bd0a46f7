"""The Prometheus text the dashboard reads: vLLM's and llama-server's, in their real format, and
whatever else a server may send instead (the parser takes any bytes and never raises)."""

from __future__ import annotations

import math
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from app.backend import prometheus
from app.backend.prometheus import MAX_LABELS, MAX_LINES, Sample
from app.backend.server_metrics import MAX_COUNT, MAX_TOKENS, from_samples, from_slots, generated_total
from app.ui.widgets.server_dashboard import server_line, server_lines
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

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
PROPERTY = settings(max_examples=300, deadline=None)


def test_labels_are_summed_and_comments_skipped() -> None:
    text = 'a{x="1"} 1.5\na{x="2",y="}"} 2 1712345678\n# b 3\n  # indented comment\n\nc 4\n'
    assert prometheus.parse(text).totals() == {"a": 3.5, "c": 4.0}


def test_a_value_that_is_not_finite_makes_its_total_unknown() -> None:
    totals = prometheus.parse("c NaN\nd +Inf\nd 1\ne -Inf\nf 1e308\nf 1e308\ng 2\n").totals()
    assert totals == {"c": None, "d": None, "e": None, "f": None, "g": 2.0}


def test_label_values_unescape_as_the_format_says() -> None:
    parsed = prometheus.parse('a{x="q\\"b\\\\s\\nn",y="{}=,# "} 1.5e3 -12\n')
    assert parsed.samples == (Sample("a", (("x", 'q"b\\s\nn'), ("y", "{}=,# ")), 1500.0, -12),)


def test_values_are_go_floats() -> None:
    text = "a .5\nb -1E-2\nc +3.\nd Inf\ne -inf\nf nan\ng 1_000\nh 0x10\ni 1e\nj ++1\n"
    parsed = prometheus.parse(text)
    values = {s.name: s.value for s in parsed.samples}
    assert values["a"] == 0.5 and values["b"] == -0.01 and values["c"] == 3.0
    assert values["d"] == math.inf and values["e"] == -math.inf and math.isnan(values["f"])
    assert set(values) == set("abcdef") and parsed.skipped == 4


def test_malformed_lines_are_counted_not_fatal() -> None:
    bad = [
        "bad line",
        "a{x=1} 2",  # unquoted label value
        'a{x="1" 2',  # no closing brace
        'a{x="1",x="2"} 1',  # a label twice
        'a{x="\\t"} 1',  # an escape the format does not have
        "1abc 2",  # a name cannot start with a digit
        "a 1 99999999999999999999999999",  # a timestamp beyond int64
        "a 1 " + "9" * 5000,  # beyond even Python's int() limit
        "a 1 2 3",
        "a\x1b]0;x\x07 1",
        "a",
    ]
    parsed = prometheus.parse("\n".join(["ok 1", *bad, "ok 2"]))
    assert parsed.totals() == {"ok": 3.0} and parsed.skipped == len(bad)


def test_lines_end_only_at_newline() -> None:
    """\\x0b, \\x1c and \\x85 split a line for str.splitlines, not for the exposition format."""
    parsed = prometheus.parse("a 1\x0bb 2\nc 3\x85d 4\ne 5\r\n")
    assert parsed.totals() == {"e": 5.0} and parsed.skipped == 2


def test_lines_and_labels_are_capped() -> None:
    parsed = prometheus.parse("a 1\n" * (MAX_LINES + 10))
    assert len(parsed.samples) == MAX_LINES and parsed.skipped == 10
    many = ",".join(f'l{i}="v"' for i in range(MAX_LABELS + 1))
    parsed = prometheus.parse(f"a{{{many}}} 1\nb{{{many.rpartition(',')[0]}}} 1\n")
    assert [s.name for s in parsed.samples] == ["b"] and parsed.skipped == 1


def test_vllm_names_become_the_dashboard_figures() -> None:
    samples = prometheus.parse(VLLM_METRICS % {"running": 2, "generated": 40}).totals()
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
    samples = prometheus.parse(LLAMA_SERVER).totals()
    snap = from_samples(samples)
    assert snap is not None and (snap.running, snap.waiting, snap.kv_usage) == (2, 1, None)
    assert generated_total(samples) == 3469
    slots = from_slots([{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}])
    assert slots is not None and slots.running == 1 and slots.source == "llama-server /slots"
    assert from_samples({"other_metric": 1.0}) is None and from_slots({"not": "a list"}) is None


def test_impossible_figures_are_unknown_not_shown() -> None:
    """750% of the KV cache, a 300-digit running count, more hits than queries: "?" on the dashboard."""
    text = VLLM_METRICS % {"running": 0, "generated": 0}
    text = text.replace("} 0.25", "} 7.5").replace("} 50.0", "} 500.0").replace("} 3.0", "} -3")
    text = text.replace('running{engine="0",model_name="fake"} 0', "running{} 1" + "0" * 300)
    samples = prometheus.parse(text + 'vllm:num_requests_waiting{engine="1"} 2.6\n').totals()
    snap = from_samples(samples)
    assert snap is not None and snap.source == "vLLM metrics"
    assert (snap.running, snap.waiting, snap.kv_usage, snap.prefix_hit_rate, snap.preemptions) == (
        None,
        3,
        None,
        None,
        None,
    )
    assert generated_total(prometheus.parse("vllm:generation_tokens_total -5\n").totals()) is None


def check(parsed: prometheus.Exposition) -> None:
    """What the dashboard relies on, whatever came in."""
    for sample in parsed.samples:
        assert isinstance(sample.value, float)
        assert METRIC_NAME.fullmatch(sample.name)
        assert all(LABEL_NAME.fullmatch(name) and isinstance(value, str) for name, value in sample.labels)
        assert sample.timestamp is None or -(2**63) <= sample.timestamp < 2**63
    assert parsed.skipped >= 0
    assert all(v is None or math.isfinite(v) for v in parsed.totals().values())


@PROPERTY
@given(st.text())
def test_any_text_parses_without_an_exception(text: str) -> None:
    check(prometheus.parse(text))


@PROPERTY
@given(st.binary())
def test_any_bytes_parse_without_an_exception(data: bytes) -> None:
    check(prometheus.parse(data))


# Lines close to the format, so the parser's branches are reached, not only its first check.
NEAR = st.lists(
    st.sampled_from(
        ["a", "{", "}", '"', "\\", "=", ",", " ", "\t", "\n", "#", "1", "e", "+Inf", "NaN", ".", "-"]
    )
).map("".join)


@PROPERTY
@given(NEAR)
def test_near_misses_parse_without_an_exception(text: str) -> None:
    check(prometheus.parse(text))


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition_line(sample: Sample) -> str:
    labels = ",".join(f'{name}="{escape(value)}"' for name, value in sample.labels)
    braced = f"{{{labels}}}" if labels else ""
    stamp = "" if sample.timestamp is None else f" {sample.timestamp}"
    return f"{sample.name}{braced} {sample.value!r}{stamp}"


def identifier(first: str, rest: str) -> st.SearchStrategy[str]:
    return st.builds(str.__add__, st.sampled_from(first), st.text(alphabet=rest, max_size=12))


LETTERS = "abcxyzABCXYZ_"
SAMPLES = st.builds(
    Sample,
    name=identifier(LETTERS + ":", LETTERS + ":0189"),
    labels=st.dictionaries(identifier(LETTERS, LETTERS + "0189"), st.text(max_size=20), max_size=4).map(
        lambda d: tuple(d.items())
    ),
    value=st.floats(),
    timestamp=st.none() | st.integers(-(2**63), 2**63 - 1),
)


@PROPERTY
@given(st.lists(SAMPLES, max_size=8))
def test_valid_samples_round_trip(samples: list[Sample]) -> None:
    text = "# HELP x some help\n# TYPE x gauge\n" + "\n".join(map(exposition_line, samples)) + "\n"
    parsed = prometheus.parse(text)
    assert parsed.skipped == 0 and len(parsed.samples) == len(samples)
    for got, sent in zip(parsed.samples, samples, strict=True):
        assert (got.name, got.labels, got.timestamp) == (sent.name, sent.labels, sent.timestamp)
        assert got.value == sent.value or (math.isnan(got.value) and math.isnan(sent.value))


VLLM_NAMES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
]


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(VLLM_NAMES), st.floats()), min_size=1))
def test_any_values_become_figures_that_can_be_true(values: list[tuple[str, float]]) -> None:
    text = "vllm:num_requests_running 0\n" + "".join(f"{name} {value!r}\n" for name, value in values)
    samples = prometheus.parse(text).totals()
    snap = from_samples(samples)
    assert snap is not None
    for figure in (snap.running, snap.waiting, snap.preemptions):
        assert figure is None or (isinstance(figure, int) and 0 <= figure <= MAX_COUNT)
    for share in (snap.kv_usage, snap.prefix_hit_rate):
        assert share is None or 0 <= share <= 1
    total = generated_total(samples)
    assert total is None or 0 <= total <= MAX_TOKENS
    shown = str(server_lines(snap)) + server_line(snap)
    assert not re.search(r"nan|inf|\d{11}|[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown.lower())
