"""SamplingParams accepts every documented value and names the field of every bad one."""

from __future__ import annotations

import math

import pytest

from engine.core.sampling_params import SamplingParams, SamplingParamsError

INVALID = [
    ("temperature", -0.1),
    ("temperature", math.inf),
    ("temperature", math.nan),
    ("temperature", "hot"),
    ("temperature", 100.5),
    pytest.param("temperature", 10**400, id="temperature-10**400"),  # too large for a float: OverflowError
    ("top_k", -2),
    ("top_k", 2.5),
    ("top_k", True),
    ("top_p", 0.0),
    ("top_p", 1.01),
    ("top_p", math.nan),
    ("min_p", -0.01),
    ("min_p", 1.5),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.0),
    ("repetition_penalty", math.inf),
    ("repetition_penalty", 1e300),  # inf in float32: degenerate output, NaN where a logit is 0
    ("repetition_penalty", 1e-3),
    ("presence_penalty", 2.5),
    ("presence_penalty", -2.01),
    ("frequency_penalty", 3),
    ("frequency_penalty", math.nan),
    ("max_tokens", 0),
    ("max_tokens", 10.0),
    ("seed", -1),
    ("seed", 2**64),
    ("seed", "42"),
    ("stop_token_ids", [7, -1]),
    ("stop_token_ids", [7, "8"]),
    ("stop_token_ids", 7),
    ("stop", ["ok", ""]),
    ("stop", "###"),
    ("stop", [3]),
    ("stop", ["x"] * 17),
    ("stop", ["x" * 257]),  # matched at every step of every batch it is in
    ("ignore_eos", 1),
]


@pytest.mark.parametrize(("name", "value"), INVALID)
def test_invalid_value_raises_naming_the_field(name, value):
    with pytest.raises(SamplingParamsError, match=rf"SamplingParams\.{name} must be .*, got "):
        SamplingParams(**{name: value})


def test_error_is_a_value_error_on_one_line():
    with pytest.raises(ValueError) as info:
        SamplingParams(top_p=0)
    assert "\n" not in str(info.value) and "(0, 1]" in str(info.value)


def test_boundary_values_are_accepted():
    params = SamplingParams(
        temperature=100,
        top_k=-1,
        top_p=1,
        min_p=1.0,
        repetition_penalty=0.01,
        presence_penalty=-2,
        frequency_penalty=2.0,
        seed=2**64 - 1,
        max_tokens=1,
        stop_token_ids=(7, 0),
        stop=("\n\n", *["x" * 256] * 15),
        ignore_eos=True,
    )
    assert params.stop_token_ids == [7, 0] and params.stop[0] == "\n\n" and len(params.stop) == 16
    assert SamplingParams(repetition_penalty=100).repetition_penalty == 100


@pytest.mark.parametrize(("temperature", "greedy"), [(0.0, True), (1e-7, True), (0.01, False), (1.0, False)])
def test_is_greedy(temperature, greedy):
    assert SamplingParams(temperature=temperature).is_greedy is greedy


def test_has_penalties_only_when_a_penalty_is_set():
    assert not SamplingParams().has_penalties
    assert SamplingParams(repetition_penalty=1.1).has_penalties
    assert SamplingParams(presence_penalty=-0.5).has_penalties
    assert SamplingParams(frequency_penalty=0.5).has_penalties


def test_list_defaults_are_not_shared_between_requests():
    first, second = SamplingParams(), SamplingParams()
    first.stop_token_ids.append(7)
    first.stop.append("END")
    assert second.stop_token_ids == [] and second.stop == []
