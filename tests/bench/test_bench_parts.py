"""The harness's own arithmetic: percentiles, latency windows, scenario rules, peak RSS parsing, shapes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from bench import stats
from bench.checkpoint import SHAPES, tiny_checkpoint
from bench.decode_bytes import measure
from bench.rss import peak_rss_mib
from bench.scenario import RequestSpec, RequestTrace, Scenario
from bench.sliding_kv import report, run_conversation
from model.arch.registry import config_from_dict, load_config


def test_percentile_interpolates_like_numpy_and_skips_missing_runs():
    assert stats.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert stats.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 99) == pytest.approx(4.96)
    assert stats.percentile([], 50) is None
    assert stats.median([3.0, None, 1.0]) == 2.0
    assert stats.ratio(1.0, None) is None


def test_itls_between_counts_gaps_ending_inside_the_window():
    stream = RequestTrace(arrival=0.0, prompt=[1], token_times=[1.0, 2.0, 4.0, 5.0])
    assert stream.itls == [1.0, 2.0, 1.0]
    assert stats.itls_between([stream], 2.0, 4.0) == [2.0]
    assert stream.ttft == 1.0


def test_rates_span_from_first_arrival_or_first_token():
    traces = [
        RequestTrace(arrival=0.0, prompt=[1], token_times=[1.0, 2.0, 3.0]),
        RequestTrace(arrival=1.0, prompt=[1], token_times=[2.0, 3.0]),
    ]
    assert stats.output_rate(traces) == 5 / 3
    assert stats.decode_rate(traces) == 3 / 2
    # from the last first token (2.0): the tokens at 3.0 of both streams, over 1 s
    assert stats.batch_decode_rate(traces) == 2 / 1


def test_continuations_carry_the_history_into_their_context_length():
    first = RequestSpec((1,) * 10, 4)
    second = RequestSpec((2,) * 3, 5, after=(0, 4), continues=0)
    assert Scenario((first, second), ((0,), (1,))).context_lengths() == [14, 22]


@pytest.mark.parametrize(
    ("requests", "groups"),
    [
        ((RequestSpec((1,), 4),), ((0,), (0,))),  # a request in two groups
        ((RequestSpec((1,), 4, after=(0, 1)),), ((0,),)),  # waits on itself
        ((RequestSpec((1,), 4), RequestSpec((1,), 4, after=(0, 5))), ((0, 1),)),  # more tokens than made
        ((RequestSpec((1,), 4), RequestSpec((1,), 4, after=(0, 2), continues=0)), ((0, 1),)),  # mid-turn
    ],
)
def test_scenario_rejects_impossible_arrivals(requests, groups):
    with pytest.raises(ValueError):
        Scenario(requests, groups)


def test_peak_rss_reads_the_kernel_high_water_mark(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmHWM:\t  2097152 kB\nVmRSS:\t 1024 kB\n")
    assert peak_rss_mib(status) == 2048.0


def test_the_kernel_benchmark_covers_every_linear_of_a_step():
    """bench.kernels times exactly the weights one 350M forward step multiplies by."""
    from bench.kernels import lfm2_350m_config, step_shapes

    config = lfm2_350m_config()
    linear_suffixes = ("proj.weight", ".w1.weight", ".w2.weight", ".w3.weight")
    in_checkpoint = [
        shape for name, shape in config.expected_shapes().items() if name.endswith(linear_suffixes)
    ]
    head = (config.vocab_size, config.hidden_size)  # tied: the embedding table
    covered = sum(n * k for n, k in step_shapes(config))
    assert covered == sum(n * k for n, k in [*in_checkpoint, head])


def test_the_kernel_benchmark_builds_another_checkouts_kernels(tmp_path, capsys):
    """--against-checkout: a folder without kernel sources is named; a checkout's own build loads."""
    from bench.kernels import checkout_build
    from model.native import kernels

    assert checkout_build(tmp_path, "avx2") is None
    assert "no kernel sources" in capsys.readouterr().err
    if (native := kernels.load()) is None:
        pytest.skip(f"native CPU kernels cannot run here: {kernels.unavailable_reason()}")
    other = checkout_build(Path(__file__).resolve().parents[2], native.ISA)
    assert other is not None and other.ISA == native.ISA


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_random_shape_is_its_model_and_its_tiny_run_is_that_architecture(shape, tmp_path):
    """--shape's random weights have the published size (LFM2-350M, LFM3-1.7B, LFM2-8B-A1B's 8.3B in
    all), --tiny its architecture."""
    spec = SHAPES[shape]
    fields = {k: v for k, v in spec.fields.items() if k != "weight_std"}
    tiny = load_config(tiny_checkpoint(tmp_path, shape))
    config = config_from_dict({**spec.fields, "model_type": tiny.model_type})
    assert isinstance(config, type(tiny))
    for name, value in fields.items():
        assert getattr(config, name) == value, name
    parameters = sum(math.prod(s) for s in config.expected_shapes().values())
    size, unit = re.search(r"-([\d.]+)([mb])\b", shape).groups()  # lfm2-8b-a1b: 8b in all, a1b active
    published = float(size) * (1e6 if unit == "m" else 1e9)
    assert abs(parameters - published) < 0.1 * published


def test_the_sliding_kv_measurement_reports_a_bounded_peak_against_every_position(tmp_path):
    figures = run_conversation(
        tiny_checkpoint(tmp_path, "lfm3-1.7b"), tokens=480, turns=3, reply=20, block_size=4, seed=0
    )
    bound = -(-(figures.window - 1) // figures.block_size) + 1
    assert figures.tokens == 480 and 0 < figures.sliding_blocks_peak <= bound
    # every one of the 120 blocks' positions kept, against the peak held: the same bytes per block
    assert figures.sliding_bytes_unbounded * figures.sliding_blocks_peak == 120 * figures.sliding_bytes_peak
    assert "sliding-window KV held, peak" in report(figures)


@pytest.mark.slow
@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_an_moe_decode_step_reads_its_active_parameters_and_no_other_expert(tmp_path, quantize):
    """bench.decode_bytes: a 1-stream step runs k experts per MoE layer, so it reads what is active."""
    figures = measure(tiny_checkpoint(tmp_path, "lfm2-8b-a1b"), quantize, prompt_tokens=20)
    assert figures.experts_per_layer == 2  # the tiny "moe" preset: 2 of 8
    assert 0.95 <= figures.read / figures.active <= 1.0  # a conv's taps and q/k norms go uncounted
    assert figures.read < 0.75 * figures.total
