"""SamplingParams accepts every documented value and names the field of every bad one."""

from __future__ import annotations

import math

import pytest

from engine.sampling_params import SamplingParams, SamplingParamsError

INVALID = [
    ("temperature", -0.1),
    ("temperature", math.inf),
    ("temperature", math.nan),
    ("temperature", "hot"),
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
        temperature=0,
        top_k=-1,
        top_p=1,
        min_p=1.0,
        repetition_penalty=1e-3,
        presence_penalty=-2,
        frequency_penalty=2.0,
        seed=2**64 - 1,
        max_tokens=1,
        stop_token_ids=(7, 0),
        stop=("\n\n",),
        ignore_eos=True,
    )
    assert params.stop_token_ids == [7, 0] and params.stop == ["\n\n"]


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
